"""Docs that cannot drift: every block of README.md and docs/*.md marked `<!-- run -->` is run
here and the output it quotes is compared with the real output (numbers may differ, words may
not; the convention is in tests/docs_runner.py and docs/README.md)."""

from __future__ import annotations

import os
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
    assert in_process_command("""python -c "import x; print([1], x.f('a'))" > /dev/null""") == \
        InProcess("python", ["-c", "import x; print([1], x.f('a'))"], stdout=False)
    assert in_process_command("python -c 'print(\"$HOME\")'") == \
        InProcess("python", ["-c", 'print("$HOME")'])  # single quotes: bash expands nothing
    assert in_process_command("python snippet.py") == InProcess("python", ["snippet.py"])
    assert in_process_command("A_B=1024 C='x y' export-gelu m.pt") == \
        InProcess("export-gelu", ["m.pt"], env={"A_B": "1024", "C": "x y"})
    for shell in ("export-gelu m.pt | head", "export-gelu m.pt > out.txt", "export-gelu $M",
                  "export-gelu m.pt && ls", "export-gelu m.pt; ls", "export-gelu `cat f`",
                  "export-gelu *.pt", "X=$Y export-gelu m.pt", "export-gelu m.pt < in",
                  'python -c "print($X)"', 'python -c "print(`ls`)"', 'python -c "a\\"',
                  "python -c 'print(1)' | head", "python -c 'print(1)' x",
                  "python -c 'a' && python -c 'b'", "X=1 python -c 'print(1)'",
                  "python -m tests.trtexec_standin --install trtexec", "python -V",
                  "python *.py", "ls", "export-gelu 'unclosed"):
        assert in_process_command(shell) is None, shell


def test_what_stays_a_program():
    """Every Python block and every `python -c` line of the docs runs in the test's process
    (tests/in_process_python.py), and so does `export-gelu` after a `VAR=value` prefix; what
    bash still runs is only these programs: `ls`, `printf`, `polygraphy`, the trtexec
    stand-in and the device scripts it plays for, and docs/cli.md's console script
    (`AS_PROGRAM`)."""
    in_bash: set[str] = set()
    for b in BLOCKS:
        if b.kind == "python":
            assert in_process_command("python snippet.py") is not None
            assert b.name.split(":")[0] not in AS_PROGRAM, b.name
            continue
        for c in b.commands():
            if b.name.split(":")[0] not in AS_PROGRAM and in_process_command(c.text) is None:
                assert not c.text.startswith("python -c"), f"{b.name}: {c.text}"
                words = c.text.replace("\\\n", " ").split()
                while "=" in words[0]:  # a `VAR=value` prefix
                    words = words[1:]
                in_bash.add(" ".join(words[:3]))
    assert {w.split()[0] for w in in_bash} == {"ls", "printf", "polygraphy", "python", "sh"}, \
        in_bash
    assert {w for w in in_bash if w.startswith("python")} == \
        {"python -m tests.trtexec_standin"}, in_bash


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
    """docs/cli.md's block (`AS_PROGRAM`) runs the installed console script in bash: its
    start-up stays covered by the docs (a real export by the console script is
    tests/cli/test_fresh_clone.py's). docs/big-models.md's `VAR=value` prefix runs in this
    process with the variable set for the run (its block fails if the threshold is not
    read: no external data file to list) and unset after."""
    as_program = [c.text for b in BLOCKS if b.kind == "console" for c in b.commands()
                  if "export-gelu" in c.text and
                  (b.name.split(":")[0] in AS_PROGRAM or in_process_command(c.text) is None)]
    assert any(t.startswith("export-gelu --version") for t in as_program), as_program
    prefixed = [in_process_command(c.text) for b in BLOCKS if b.kind == "console"
                for c in b.commands() if c.text.startswith("EXPORT_GELU_EXTERNAL_DATA_THRESHOLD=")]
    assert prefixed and all(p is not None and p.program == "export-gelu" and
                            p.env["EXPORT_GELU_EXTERNAL_DATA_THRESHOLD"] for p in prefixed)


def test_a_prefix_is_set_for_the_run_only(tmp_path: Path):
    (tmp_path / "show.py").write_text("import os\nprint(os.environ.get('DOCS_RUN_X'))\n")
    assert run_command("DOCS_RUN_X='a b' python show.py", tmp_path) == (0, "a b\n")
    assert "DOCS_RUN_X" not in os.environ


LEAKY = """\
import logging, os, random, sys, warnings
import numpy, torch
import helper
os.environ["DOCS_RUN_LEAK"] = "1"
os.environ.pop("DOCS_RUN_KEPT")
os.chdir("..")
sys.argv.append("extra")
sys.path.append("elsewhere")
warnings.warn("shown as a program shows it")
warnings.simplefilter("ignore")
logging.getLogger().addHandler(logging.NullHandler())
logging.getLogger().setLevel(logging.DEBUG)
logging.disable(logging.CRITICAL)
random.seed(1); numpy.random.seed(1); torch.manual_seed(1)
torch.set_grad_enabled(False); torch.set_default_dtype(torch.float64)
print(__name__, __file__ if "__file__" in globals() else "-", sys.argv, helper.VALUE)
print("to stderr", file=sys.stderr)
"""


def _states() -> tuple:
    import logging
    import random
    import sys
    import warnings

    import numpy
    import torch

    root = logging.getLogger()
    return (dict(os.environ), os.getcwd(), list(sys.argv), list(sys.path),
            sys.modules["__main__"], list(warnings.filters), list(root.handlers), root.level,
            logging.root.manager.disable, random.getstate(), str(numpy.random.get_state()),
            torch.random.get_rng_state().tolist(), torch.is_grad_enabled(),
            torch.get_default_dtype())


@pytest.mark.parametrize("how", ["script", "-c"])
def test_in_process_python_leaves_nothing_behind(tmp_path: Path, how: str, monkeypatch):
    """A Python block or `python -c` line run in the test's process (tests/in_process_python.py)
    sees what a program sees (`__main__`, its argv, its folder's modules, warnings on its
    stderr) and leaves nothing for the tests after it: environment, folder, argv, sys.path,
    `__main__`, the folder's modules, warnings filters, logging, random states, torch modes."""
    import sys

    monkeypatch.setenv("DOCS_RUN_KEPT", "yes")
    (tmp_path / "helper.py").write_text("VALUE = 42\n")
    (tmp_path / "snippet.py").write_text(LEAKY)
    before = _states()
    command = "python snippet.py" if how == "script" else f"python -c '{LEAKY}'"
    code, printed = run_command(command, tmp_path)
    assert _states() == before
    assert "helper" not in sys.modules
    assert code == 0, printed
    name = "snippet.py" if how == "script" else "-"
    argv = "['snippet.py', 'extra']" if how == "script" else "['-c', 'extra']"
    assert missing_lines(["…UserWarning: shown as a program shows it",
                          f"__main__ {name} {argv} 42", "to stderr"], printed, tmp_path) == [], \
        printed


def test_in_process_python_exits_as_an_interpreter_does(tmp_path: Path):
    """An uncaught exception: its traceback (from the code's own line) and exit 1;
    `sys.exit(N)`: N; `sys.exit("text")`: the text on stderr and 1."""
    code, printed = run_command("python -c \"print('before'); {}['key']\"", tmp_path)
    assert code == 1 and printed.startswith("before\nTraceback"), printed
    assert 'File "<string>", line 1' in printed and printed.endswith("KeyError: 'key'\n")
    assert "in_process_python" not in printed
    assert run_command("python -c 'import sys; sys.exit(3)'", tmp_path) == (3, "")
    assert run_command("python -c 'raise SystemExit(\"no model\")'", tmp_path) == (1, "no model\n")
