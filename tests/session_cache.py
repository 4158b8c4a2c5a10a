"""Files the tests build once and share: across tests, across pytest-xdist workers and across
sessions (docs/testing.md).

An entry lives under the pytest cache (`.pytest_cache/d/export-gelu/<key>/<name>`); without
the cache plugin (`-p no:cacheprovider`) under the session's temporary folder. The key hashes
everything that could change what a builder makes: the package and examples sources, the
tests' shared helper modules, the source file of the builder itself, and the versions of
Python and of the libraries that write models. A stale entry is therefore never served: any
edit makes a new key (older keys are removed at the start of the next session).

Workers never race on an entry: the first to want it holds a lock file while it builds into
a temporary name, then renames it into place (`os.replace`), so others wait and then read the
whole entry, and an interrupted build leaves no partial entry behind.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # not POSIX: entries are still whole (os.replace), builds may repeat
    fcntl = None

ROOT = Path(__file__).resolve().parents[1]
#: The sources every entry depends on (all *.py below these folders).
SOURCE_DIRS = ("export_gelu", "examples")
#: Distributions whose versions change what is saved or exported.
LIBRARIES = ("torch", "onnx", "onnxruntime", "onnxscript", "onnx-graphsurgeon", "transformers",
             "diffusers", "numpy", "protobuf", "polygraphy")
#: The pytest cache's folder name (`config.cache.mkdir`).
CACHE_NAME = "export-gelu"


def _hash_files(paths: list[Path], digest: hashlib._Hash) -> None:
    for path in paths:
        digest.update(path.relative_to(ROOT).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")


@cache
def source_key() -> str:
    """A hash of what every entry depends on: sources, shared test helpers, versions."""
    digest = hashlib.sha256()
    files = [p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py")]
    files += [p for p in (ROOT / "tests").glob("*.py") if not p.name.startswith("test_")]
    _hash_files(sorted(files), digest)
    digest.update(sys.version.encode())
    for lib in LIBRARIES:
        try:
            version = metadata.version(lib)
        except metadata.PackageNotFoundError:
            version = "-"
        digest.update(f"{lib}={version};".encode())
    return digest.hexdigest()[:16]


@cache
def _file_key(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


@contextmanager
def _locked(lock: Path) -> Iterator[None]:
    with lock.open("a") as fh:
        if fcntl is not None:
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh, fcntl.LOCK_UN)


class SessionCache:
    """Entries built once per key: `file(name, build)` and `folder(name, build)`."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / source_key()
        self.root.mkdir(parents=True, exist_ok=True)

    def prune(self, older_than_s: float = 3600.0) -> list[Path]:
        """Remove the entries of other keys not written to for `older_than_s` (stale: the
        sources changed since). Returns what was removed."""
        removed = []
        for old in self.base.iterdir():
            if old.is_dir() and old != self.root and \
                    time.time() - old.stat().st_mtime > older_than_s:
                shutil.rmtree(old, ignore_errors=True)
                removed.append(old)
        return removed

    def _entry(self, name: str, build: Callable[[Path], object], *, folder: bool) -> Path:
        owner = inspect.getsourcefile(build)
        scope = _file_key(owner) if owner and Path(owner).is_file() else "-"
        final = self.root / scope / name
        if final.exists():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        with _locked(final.parent / f".{name}.lock"):
            if final.exists():  # another worker built it while this one waited
                return final
            tmp = final.parent / f".tmp-{os.getpid()}-{name}"  # same suffix as the entry
            shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
            if folder:
                tmp.mkdir()
            try:
                build(tmp)
                os.replace(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else \
                    tmp.unlink(missing_ok=True)
                raise
        return final

    def file(self, name: str, build: Callable[[Path], object]) -> Path:
        """The entry `name`: a file `build(path)` writes at `path` (once per key)."""
        return self._entry(name, build, folder=False)

    def folder(self, name: str, build: Callable[[Path], object]) -> Path:
        """The entry `name`: a folder `build(folder)` fills (once per key). Treat it as
        read-only; copy it where a test changes or adds files."""
        return self._entry(name, build, folder=True)


_CONFIG: list[Any] = []  # the running session's pytest config (share_from)


def share_from(config: Any) -> None:
    """Let `shared()` reach the session's cache (tests/conftest.py, at configure)."""
    _CONFIG[:] = [config]


@cache
def shared() -> SessionCache | None:
    """The session's cache for helpers that are no fixture (tests/onnx_graphs.py's exported
    zoo): the one the `session_cache` fixture uses; None without the pytest cache
    (`-p no:cacheprovider`) or outside pytest, where such a helper keeps what it builds in its
    own process."""
    pytest_cache = getattr(_CONFIG[0], "cache", None) if _CONFIG else None
    return SessionCache(pytest_cache.mkdir(CACHE_NAME)) if pytest_cache is not None else None

