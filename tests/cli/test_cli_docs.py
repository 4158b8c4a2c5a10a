"""`--help` and docs/cli.md's flag tables come from one source (the argparse parsers), every
command's `--help` carries examples, and `--version` is CHANGELOG.md's newest version.

The tables are read from the committed docs/cli.md and the flags from the `--help` a real
`export-gelu` process prints, so a flag renamed, dropped or added on one side only fails."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from export_gelu.cli import export_parser, inspect_parser, verify_parser
from export_gelu.cli_docs import DOC, committed, render
from tests.conftest import ROOT

#: docs/cli.md's section title → (the subcommand argv, the parser that reads it).
COMMANDS = {
    "export-gelu MODEL": ([], export_parser),
    "export-gelu verify": (["verify"], verify_parser),
    "export-gelu inspect": (["inspect"], inspect_parser),
}
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def _help(argv: list[str], columns: int | None = None) -> str:
    env = {**os.environ, "COLUMNS": str(columns)} if columns else None
    done = subprocess.run([sys.executable, "-m", "export_gelu.cli", *argv, "--help"], text=True,
                          capture_output=True, check=True, env=env)
    return done.stdout


def _doc_flags() -> dict[str, set[str]]:
    """The flags each command's tables in the committed docs/cli.md list (first column)."""
    sections = re.split(r"^### `(.+?)`$", committed(DOC.read_text(encoding="utf-8")),
                        flags=re.M)
    flags: dict[str, set[str]] = {}
    for title, body in zip(sections[1::2], sections[2::2]):
        rows = [line.split(" | ")[0] for line in body.splitlines() if line.startswith("| `")]
        flags[title] = {f for cell in rows for f in re.findall(r"`(--?[A-Za-z][\w-]*)", cell)}
    return flags


def _help_flags(text: str) -> set[str]:
    """The flags `--help` defines: its option lines, up to where their help text starts."""
    return {f for line in text.splitlines() if line.startswith("  -")
            for f in _FLAG.findall(line[2:].split("  ")[0])}


def test_the_committed_flag_tables_are_the_parsers():
    assert committed(DOC.read_text(encoding="utf-8")) == render(), (
        "docs/cli.md's flag tables differ from the parsers in export_gelu/cli.py: regenerate "
        "them with `python -m export_gelu.cli_docs --write` and commit docs/cli.md")


def test_docs_and_the_real_help_list_the_same_flags():
    documented = _doc_flags()
    assert set(documented) == set(COMMANDS)
    for title, (argv, _parser) in COMMANDS.items():
        shown = _help_flags(_help(argv)) - {"-h", "--help", "--version"}
        assert shown, title  # the reader below found the option lines
        assert documented[title] == shown, (title, documented[title] ^ shown)


def test_the_flag_readers_see_a_missing_flag():
    """The two readers themselves: a table row or a help line taken away is noticed."""
    text = _help([])
    assert "--no-verify" in _help_flags(text)
    without = "\n".join(line for line in text.splitlines() if "--no-verify" not in line)
    assert "--no-verify" not in _help_flags(without)
    assert "--no-verify" in _doc_flags()["export-gelu MODEL"]


@pytest.mark.parametrize("title", sorted(COMMANDS))
def test_every_help_example_parses(title):
    """Each `examples:` line of the real `--help` parses with that command's parser."""
    argv, parser = COMMANDS[title]
    text = _help(argv)
    assert "examples:" in text
    lines = text.split("examples:", 1)[1].replace("\\\n", " ").splitlines()  # `\` goes on
    examples = [line.split("#")[0] for line in lines if line.startswith("  export-gelu")]
    assert len(examples) >= 2, text
    for line in examples:
        words = shlex.split(line)[1:]
        command = words[:1] if words[0] in ("verify", "inspect") else []
        if command != argv:
            continue  # another command's example (export's help shows verify's too)
        parser().parse_args(words[len(argv):])  # an unknown or malformed flag exits 2


@pytest.mark.parametrize("title", sorted(COMMANDS))
def test_no_help_line_is_wider_than_100_columns(title):
    """In a 100-column terminal every line of `--help` fits: argparse wraps the flags' help,
    and the examples (printed as written) are kept within it (one was 150 columns)."""
    text = _help(COMMANDS[title][0], columns=100)
    wide = [line for line in text.splitlines() if len(line) > 100]
    assert wide == [], wide
    assert len(max(text.splitlines(), key=len)) > 80  # the width was 100, not a pipe's 80


def test_the_usage_lines_are_not_run_together():
    """docs/cli.md shows export's usage as its three lines (one per command), and a long
    usage wrapped between whole options, as `--help` prints them."""
    blocks = re.findall(r"^```\n(usage: .*?)\n```", committed(DOC.read_text(encoding="utf-8")),
                        flags=re.M | re.S)
    assert len(blocks) == len(COMMANDS)
    export = blocks[0].splitlines()
    assert [line.removeprefix("usage: ").split()[:2] for line in export] == [
        ["export-gelu", "MODEL"], ["export-gelu", "verify"], ["export-gelu", "inspect"]]
    for block in blocks:
        lines = block.splitlines()
        assert all(len(line) <= 100 for line in lines), lines
        assert all(line.count("[") == line.count("]") for line in lines), lines
    assert len(blocks[1].splitlines()) > 3  # verify's many options, wrapped


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
