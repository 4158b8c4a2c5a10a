"""Helpers the hostile-input tests share (tests/exporter/test_hostile_folders.py,
tests/device/test_hostile_device.py, tests/cli/test_hostile_names.py, …): file hashes, a
canary whose access time shows whether anything read it, the one-line error, a folder
outside the work folder that a hostile run must neither read nor write, and a file-size limit
for a run in the test's process.

A canary's access time is set far in the past, so any read moves it (relatime updates an
atime older than a day; on a file system mounted noatime `atime_counts` is False and that
one assertion is skipped).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

OLD_ATIME = 946684800  # 2000-01-01: any read after this moves it (relatime)
#: What a terminal obeys: ESC (CSI, OSC), CR, BEL, a C1 CSI, a bidirectional override.
RAW_CONTROLS = ("\x1b", "\r", "\x07", "\x9b", "\u202e")


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """This process's file-size limit (the soft one, as `ulimit -f` sets) `limit` bytes while
    the block runs: a write past it fails with EFBIG. Python ignores SIGXFSZ in every process
    it starts, so a run in the test's process meets the limit as a program of its own would;
    the tests run the CLI in the block, and the limit is restored after."""
    assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shas(folder: Path) -> dict[str, str]:
    """Every file under `folder` (links followed) and its hash, by relative path."""
    return {str(p.relative_to(folder)): sha(p) for p in sorted(folder.rglob("*"))
            if p.is_file()}


def canary(path: Path) -> Path:
    """`path` with its access time set far back: a read of it moves it."""
    st = path.stat()
    os.utime(path, ns=(OLD_ATIME * 10**9, st.st_mtime_ns))
    return path


def atime_counts(folder: Path) -> bool:
    """Whether reading a file in `folder` moves its access time (not under noatime)."""
    (folder / "atime-probe").write_bytes(b"probe")
    probe = canary(folder / "atime-probe")
    probe.read_bytes()
    counts = probe.stat().st_atime != OLD_ATIME
    probe.unlink()
    return counts


def never_read(path: Path, counts: bool) -> None:
    """The canary's atime still says it was never read (checked before anything reads it)."""
    if counts:
        assert path.stat().st_atime == OLD_ATIME, f"{path} was read"


def one_error_line(err: str, *words: str) -> str:
    """stderr is one `export-gelu: error: …` line holding `words`, no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("export-gelu: error:"), err
    assert "internal error" not in lines[0] and "Traceback" not in err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def no_raw_controls(*texts: str) -> None:
    """None of `texts` (what was printed, a Markdown report) holds a control a terminal obeys."""
    for text in texts:
        for ch in RAW_CONTROLS:
            assert ch not in text, (repr(ch), text[:2000])


class Outside:
    """A folder beside the work folder, holding a secret: a hostile run may neither read it
    (its canaries' access times) nor write there (its files' hashes, its entries)."""

    def __init__(self, folder: Path, counts: bool) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.secret = folder / "secret.txt"
        self.secret.write_text("SECRET-TOKEN-7f3a\nexport-gelu must never read this\n")
        self.counts = counts
        self.before: dict[str, str] = {}

    def file(self, name: str, data: bytes) -> Path:
        """Another file out here (a secret the run must not read)."""
        path = self.folder / name
        path.write_bytes(data)
        return path

    def arm(self) -> Outside:
        """Hash everything, then set the canaries (hashing read them)."""
        self.before = shas(self.folder)
        for path in self.folder.rglob("*"):
            if path.is_file():
                canary(path)
        return self

    def check(self, *texts: str) -> None:
        """Nothing read, written, added or removed out here; no secret in `texts`."""
        for path in self.folder.rglob("*"):
            if path.is_file():
                never_read(path, self.counts)
        assert shas(self.folder) == self.before
        for text in texts:
            assert "SECRET-TOKEN" not in text
