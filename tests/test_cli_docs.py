"""`--help` and docs/cli.md's flag tables come from one source (the argparse parsers), every
command's `--help` carries examples, and `--version` is CHANGELOG.md's newest version."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from export_gelu.cli import export_parser, inspect_parser, verify_parser
from export_gelu.cli_docs import DOC, committed, render
from tests.conftest import ROOT


def test_the_committed_flag_tables_are_the_parsers():
    assert committed(DOC.read_text(encoding="utf-8")) == render(), (
        "docs/cli.md's flag tables differ from the parsers in export_gelu/cli.py: regenerate "
        "them with `python -m export_gelu.cli_docs --write` and commit docs/cli.md")


@pytest.mark.parametrize("parser", [export_parser, verify_parser, inspect_parser])
def test_every_flag_is_in_the_tables_and_in_help(parser):
    p = parser()
    tables, helptext = render(), p.format_help()
    for action in p._actions:  # noqa: SLF001
        for option in action.option_strings:
            if option in ("-h", "--help", "--version"):
                continue
            assert f"`{option}" in tables, option
            assert option in helptext, option


@pytest.mark.parametrize("parser", [export_parser, verify_parser, inspect_parser])
def test_help_has_examples(parser):
    epilog = parser().epilog or ""
    assert "examples:" in epilog
    examples = [line for line in epilog.splitlines() if line.startswith("  export-gelu")]
    assert len(examples) >= 2, epilog


def test_the_tables_notice_a_changed_help_text():
    p = export_parser()
    action = next(a for a in p._actions if "--no-verify" in a.option_strings)  # noqa: SLF001
    action.help = "something else"
    from export_gelu.cli_docs import render_command

    assert "| `--no-verify` |  | something else |" in render_command("export-gelu MODEL", p)
    assert "something else" not in committed(DOC.read_text(encoding="utf-8"))


def test_version_is_the_changelog_newest():
    newest = re.search(r"^## (\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(),
                       flags=re.M).group(1)
    done = subprocess.run([sys.executable, "-m", "export_gelu.cli", "--version"], text=True,
                          capture_output=True, check=True)
    assert done.stdout.strip() == f"export-gelu {newest}"
