"""Docs that cannot drift: every block of README.md and docs/*.md marked `<!-- run -->` is run
here and the output it quotes is compared with the real output (numbers may differ, words may
not; the convention is in tests/docs_runner.py and docs/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_runner import Block, all_blocks, missing_lines, prepare, provide, run_block

BLOCKS = all_blocks()
#: Blocks that export several models each (a few times the others' time): `slow`.
SLOW = ("--compare-forms", "save_folder('t5'", "--dynamic seq=input_ids:1")
MIN_BLOCKS = 20


@pytest.fixture(scope="session")
def provided(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example models every block finds in its folder, saved once per session."""
    cache = tmp_path_factory.mktemp("docs-examples")
    provide(cache)
    return cache


def _param(block: Block):
    slow = any(word in "\n".join(block.body) for word in SLOW)
    return pytest.param(block, id=block.name, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_block_runs_as_documented(block: Block, provided: Path, tmp_path: Path):
    prepare(tmp_path, provided)
    problems = run_block(block, tmp_path)
    assert not problems, f"{block.name}: " + "\n".join(problems)


def test_enough_blocks_are_run(capsys):
    """The count the issue asks for; printed so a run shows how many blocks the docs hold."""
    by_file: dict[str, int] = {}
    for b in BLOCKS:
        by_file[b.path.name] = by_file.get(b.path.name, 0) + 1
    with capsys.disabled():
        print(f"\ndocs runner: {len(BLOCKS)} runnable blocks "
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
