"""The weights work folder (exporter/saving/workdir.py): made beside the output, removed when
released, and its exit hook registered once per process however many exports run."""

from __future__ import annotations

import atexit
from pathlib import Path

from export_gelu.exporter.saving.workdir import release_workdirs, weights_workdir


def test_workdirs_are_removed_on_release_and_hook_atexit_once(tmp_path: Path) -> None:
    out = tmp_path / "model.onnx"
    first = weights_workdir(out)
    assert first.parent == tmp_path and first.is_dir()
    release_workdirs()
    assert not first.exists()
    hooks = atexit._ncallbacks()  # CPython's count of registered exit functions
    for _ in range(3):  # a long-lived process exporting again and again
        folder = weights_workdir(out)
        release_workdirs()
        assert not folder.exists()
    assert atexit._ncallbacks() == hooks
    assert list(tmp_path.iterdir()) == []


def test_a_command_removes_only_its_own_workdirs(tmp_path: Path) -> None:
    """Two commands in one process (an API called from two threads): the one that ends first
    removes its own weights folder, not the other's, which is still being written."""
    import threading

    from export_gelu.exporter.saving.workdir import workdirs_of_this_run

    made: dict[str, Path] = {}
    other_made, mine_ended = threading.Event(), threading.Event()

    def other_command() -> None:
        with workdirs_of_this_run():
            made["other"] = weights_workdir(tmp_path / "other.onnx")
            other_made.set()
            mine_ended.wait(30)
            assert made["other"].is_dir()  # still there while this command runs
        assert not made["other"].exists()  # removed when it ends

    thread = threading.Thread(target=other_command)
    thread.start()
    assert other_made.wait(30)
    with workdirs_of_this_run():
        made["mine"] = weights_workdir(tmp_path / "mine.onnx")
    assert not made["mine"].exists() and made["other"].is_dir()
    mine_ended.set()
    thread.join(30)
    assert list(tmp_path.iterdir()) == []
