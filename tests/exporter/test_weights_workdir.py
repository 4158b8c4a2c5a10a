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
