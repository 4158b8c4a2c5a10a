"""Docs that cannot drift: every block of README.md and docs/*.md marked `<!-- run -->` is run
here and the output it quotes is compared with the real output (numbers may differ, words may
not; the convention is in tests/docs_runner.py and docs/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_runner import (
    AS_PROGRAM,
    PROVIDED,
    ROOT,
    Block,
    InProcess,
    all_blocks,
    in_process_command,
    missing_lines,
    prepare,
    run_block,
    run_command,
)

BLOCKS = all_blocks()
MIN_BLOCKS = 20


@pytest.fixture(scope="session")
def provided(saved_model) -> dict[str, Path]:
    """The example models every block finds in its folder: conftest's session cache, so the
    other tests' saves of the same examples are reused."""
    return {name: saved_model(example, fmt) for name, (example, fmt) in PROVIDED.items()}


def _param(block: Block):
    return pytest.param(block, id=block.name, marks=[pytest.mark.slow] if block.slow else [])


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_block_runs_as_documented(block: Block, provided: dict[str, Path], tmp_path: Path):
    prepare(tmp_path, provided)
    problems = run_block(block, tmp_path)
    assert not problems, f"{block.name}: " + "\n".join(problems)


def test_the_quick_lane_runs_some_blocks():
    """A `-m "not slow"` run still runs blocks: refusals, --no-verify exports, inspect (these
    tests start programs, so they are `e2e`: `make test` runs them, `make test-fast` not)."""
    assert sum(not b.slow for b in BLOCKS) >= 8


def test_enough_blocks_are_run(capsys):
    """The count the issue asks for; printed so a run shows how many blocks the docs hold."""
    by_file: dict[str, int] = {}
    for b in BLOCKS:
        by_file[b.path.name] = by_file.get(b.path.name, 0) + 1
    with capsys.disabled():
        print(f"\ndocs runner: {len(BLOCKS)} runnable blocks, "
              f"{sum(b.slow for b in BLOCKS)} of them slow "
              f"({', '.join(f'{k} {v}' for k, v in by_file.items())})")
    assert len(BLOCKS) >= MIN_BLOCKS


def test_a_changed_word_fails_and_a_changed_number_does_not():
    out = "Parity: PASSED (pytorch vs onnxruntime, atol 0.0001, rtol 0.001)\n" \
          "  ok   output_0: max abs 7.15e-07, max rel 9.23e-05\n"
    assert missing_lines(["Parity: PASSED (pytorch vs onnxruntime, atol 1e-05, rtol 0.01)"],
                         out) == []
    assert missing_lines(["  ok   output_0: max abs 1.2e-06, …"], out) == []
    assert missing_lines(["Parity: FAILED (pytorch vs onnxruntime, atol 0.0001, rtol 0.001)"],
                         out)
    assert missing_lines(["  FAIL output_0: max abs 7.15e-07, max rel 9.23e-05"], out)
    # order matters: quoted lines must appear in the order the docs give them
    assert missing_lines(["  ok …", "Parity: PASSED …"], out)


def test_every_docs_page_is_linked_from_the_readme():
    """The README's map of docs/ names every page there (a new page needs its line)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in (ROOT / "docs").iterdir() if p.suffix in (".md", ".json"))
    missing = [p for p in pages if f"](docs/{p})" not in readme]
    assert not missing, f"README.md's docs map lacks a line for: {', '.join(missing)}"


def test_readme_stays_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300


def test_plain_commands_run_in_this_process_and_shell_syntax_in_bash():
    """What the runner takes into the test's process (tests/docs_runner.py, `in_process_command`):
    plain `export-gelu`/save_model commands, with trailing /dev/null discards applied in bash's
    order; anything a shell would expand, connect or prefix stays in bash."""
    assert in_process_command("export-gelu bert.pt --dynamic batch=1:4:8 \\\n  -o 'a b.onnx'"
                              "   # exit 2") == \
        InProcess("export-gelu", ["bert.pt", "--dynamic", "batch=1:4:8", "-o", "a b.onnx"])
    assert in_process_command("python -m export_gelu.examples.save_model gpt2 -o g.pt") == \
        InProcess("save_model", ["gpt2", "-o", "g.pt"])
    assert in_process_command("export-gelu m.pt > /dev/null") == \
        InProcess("export-gelu", ["m.pt"], stdout=False)
    assert in_process_command("export-gelu m.pt 2>/dev/null") == \
        InProcess("export-gelu", ["m.pt"], stderr=False)
    assert in_process_command("export-gelu m.pt > /dev/null 2>&1") == \
        InProcess("export-gelu", ["m.pt"], stdout=False, stderr=False)
    assert in_process_command("export-gelu m.pt 2>&1 > /dev/null") == \
        InProcess("export-gelu", ["m.pt"], stdout=False)
    for shell in ("export-gelu m.pt | head", "export-gelu m.pt > out.txt", "export-gelu $M",
                  "export-gelu m.pt && ls", "export-gelu m.pt; ls", "export-gelu `cat f`",
                  "export-gelu *.pt", "X=1 export-gelu m.pt", "export-gelu m.pt < in",
                  "python -c 'print(1)'", "ls", "export-gelu 'unclosed"):
        assert in_process_command(shell) is None, shell


def test_in_process_output_is_one_stream_with_the_discards_applied(tmp_path: Path):
    """stdout and stderr read together, as `2>&1` does (a usage error is on stderr), and a
    trailing `> /dev/null` or `2>/dev/null` drops its stream (`--version` prints on stdout).
    The blocks themselves pin the write order (README.md's inspect: a table, then the
    one-line refusal)."""
    code, printed = run_command("export-gelu missing.pt --atol nan   # exit 2", tmp_path)
    assert code == 2 and "--atol" in printed
    code, printed = run_command("export-gelu --version > /dev/null", tmp_path)
    assert (code, printed) == (0, "")
    code, printed = run_command("export-gelu --version 2>/dev/null", tmp_path)
    assert code == 0 and printed.startswith("export-gelu ")


def test_some_block_runs_export_gelu_as_a_program():
    """docs/cli.md's block (`AS_PROGRAM`) runs the installed console script in bash, and
    commands with a `VAR=value` prefix (docs/big-models.md) do too: the real program's
    start-up stays covered by the docs."""
    as_program = [c.text for b in BLOCKS if b.kind == "console" for c in b.commands()
                  if "export-gelu" in c.text and
                  (b.name.split(":")[0] in AS_PROGRAM or in_process_command(c.text) is None)]
    assert any(t.startswith("export-gelu --version") for t in as_program), as_program
    assert any("EXPORT_GELU_EXTERNAL_DATA_THRESHOLD=" in t for t in as_program), as_program
