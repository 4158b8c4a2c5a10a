"""tests/session_cache.py, the store the fixtures build shared models in: one build per entry
across processes, whole entries only, a new key when a source changes (docs/testing.md)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from tests import session_cache
from tests.session_cache import SessionCache


def _slow_build(path: Path) -> None:
    """Appends one line per build to builds.log beside the cache, then writes the entry."""
    with (path.parents[3] / "builds.log").open("a") as log:
        log.write("built\n")
    time.sleep(0.5)
    path.write_text("entry")


def _want_entry(base: str) -> str:
    return SessionCache(Path(base)).file("shared.txt", _slow_build).read_text()


def test_an_entry_is_built_once_and_then_read(tmp_path):
    built = []

    def build(path: Path) -> None:
        built.append(path)
        path.write_text("x")

    cache = SessionCache(tmp_path / "c")
    first = cache.file("a.txt", build)
    assert cache.file("a.txt", build) == first and first.read_text() == "x"
    assert len(built) == 1 and built[0] != first  # written under another name, then moved


def test_processes_wanting_one_entry_build_it_once(tmp_path):
    base = tmp_path / "c"
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        got = pool.map(_want_entry, [str(base)] * 3)
    assert got == ["entry"] * 3
    assert (tmp_path / "builds.log").read_text() == "built\n"


def test_a_failed_build_leaves_no_entry(tmp_path):
    def broken(path: Path) -> None:
        (path / "f" if path.is_dir() else path).write_text("half")
        raise RuntimeError("build failed")

    cache = SessionCache(tmp_path / "c")
    with pytest.raises(RuntimeError):
        cache.file("b.txt", broken)
    with pytest.raises(RuntimeError):
        cache.folder("d", broken)
    left = sorted(p.name for p in cache.root.rglob("*") if p.is_file() or p.is_dir())
    assert not any(n in ("b.txt", "d", "f") or n.startswith(".tmp-") for n in left), left
    assert cache.file("b.txt", lambda path: path.write_text("whole")).read_text() == "whole"


def test_a_folder_entry_holds_what_its_builder_wrote(tmp_path):
    cache = SessionCache(tmp_path / "c")
    folder = cache.folder("bundle", lambda d: (d / "model.onnx").write_bytes(b"graph"))
    assert (folder / "model.onnx").read_bytes() == b"graph"


def test_the_key_changes_with_a_source_file(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    for d in ("export_gelu", "examples", "tests"):
        (root / d).mkdir(parents=True)
    source = root / "export_gelu" / "m.py"
    source.write_text("A = 1\n")
    monkeypatch.setattr(session_cache, "ROOT", root)
    session_cache.source_key.cache_clear()
    try:
        before = session_cache.source_key()
        source.write_text("A = 2\n")
        session_cache.source_key.cache_clear()
        assert session_cache.source_key() != before
    finally:
        session_cache.source_key.cache_clear()


def test_stale_keys_are_pruned_and_the_current_one_kept(tmp_path):
    base = tmp_path / "c"
    old = base / "0123456789abcdef"
    old.mkdir(parents=True)
    cache = SessionCache(base)
    assert cache.prune(older_than_s=3600) == []  # just written: maybe another session's
    assert cache.prune(older_than_s=-1) == [old]
    assert cache.root.is_dir() and not old.exists()
