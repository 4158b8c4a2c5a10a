"""Docs that cannot drift: every block of README.md and docs/*.md marked `<!-- run -->` is run
here and the output it quotes is compared with the real output (numbers may differ, words may
not; the convention is in tests/docs_runner.py and docs/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_runner import PROVIDED, ROOT, Block, all_blocks, missing_lines, prepare, run_block

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
