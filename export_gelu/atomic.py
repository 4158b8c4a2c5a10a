"""Every file a run writes lands whole or not at all: staged in a hidden folder beside its
final place (same file system), fsynced, renamed in with SIGINT/SIGTERM held, and removed
again when the run fails (`all_or_nothing`).

- Python exceptions, Ctrl-C and SIGTERM (the CLI turns it into KeyboardInterrupt) remove the
  staging folder on the way out.
- SIGINT/SIGTERM arriving while a folder is made or files are renamed are held until that is
  done.
- SIGKILL (or a power cut) can leave a staging folder behind. Its name records the owning
  process (`.out.onnx.export-gelu-<pid>@<host>.<random>`); the next write into the same
  folder removes staging folders whose process is gone.
- A write the world refuses (a full disk, a file-size limit) raises OSError naming the
  output it was writing (errors.py maps it to exit 2).

Names: any name the file system takes works; a staging folder's name is bounded (a long or
non-UTF-8 output name is shortened to an ASCII stem and a hash of it).

`written_file(out)` is the one way to write a single file (the report, a plot, saved
inputs); exporter/saving/save.py writes an ONNX model and its `.data` as one commit with the same
parts, and device/bundle.py swaps a whole folder in.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from export_gelu.errors import BadInputError, WorldError
from export_gelu.shown import printable as shown_printable

STAGING_TAG = "export-gelu"
#: NAME_MAX where the file system does not say (ext4, xfs, btrfs, tmpfs: 255 bytes).
DEFAULT_NAME_MAX = 255
#: Output names longer than this (bytes), or not UTF-8, are shortened in staging names.
STAGING_STEM_MAX = 64
_HOST = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:40] or "host"
_PLAIN_NAME = re.compile(rf"[A-Za-z0-9._+-]{{1,{STAGING_STEM_MAX}}}")
_STAGING_RE = re.compile(rf"^\..+\.{STAGING_TAG}-(\d+)@([A-Za-z0-9_-]+)\.[^/]+$")


def name_max(folder: Path) -> int:
    """The longest file name (bytes) `folder`'s file system takes."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return DEFAULT_NAME_MAX


def check_output_name(out: Path, suffix: str = "") -> None:
    """Exit 2 up front when `out`'s name (plus `suffix`, e.g. `.data`) is longer than its
    folder's file system takes, instead of failing after the export."""
    size = len(os.fsencode(out.name + suffix))
    limit = name_max(out.parent) if out.parent.is_dir() else DEFAULT_NAME_MAX
    if size > limit:
        what = f"its {suffix} file's name" if suffix else "its name"
        raise BadInputError(f"output {printable(out)}: {what} is {size} bytes; the file system "
                            f"takes names of at most {limit} bytes")


def printable(path: Path) -> str:
    """A path for a message, printable even when it is not UTF-8 (shown.printable)."""
    return shown_printable(path)


def check_output_path(out: Path, inputs: list[Path], *, check_name: bool = True) -> None:
    """Fail early (exit 2) on an output we could not or must not write. `check_name=False`
    for a file written only when needed (`.data`: its name is checked when it is)."""
    if not out.name or out.name in (".", ".."):
        raise BadInputError(f"output {out} is not a file name")
    if check_name:
        check_output_name(out)
    if not out.parent.exists():
        raise BadInputError(f"output directory {out.parent} does not exist")
    if not out.parent.is_dir():
        raise BadInputError(f"output directory {out.parent} is not a directory")
    can_exist = len(os.fsencode(out.name)) <= name_max(out.parent)
    if can_exist and out.is_dir():
        raise BadInputError(f"output {out} is a directory; give a file name")
    if not os.access(out.parent, os.W_OK):
        raise BadInputError(f"output directory {out.parent} is not writable")
    written = {out.resolve(): "the output", Path(str(out.resolve()) + ".data"): "its .data"}
    for path in inputs:
        if path.exists() and path.resolve() in written:
            raise BadInputError(f"refusing to overwrite the input {path} with "
                                f"{written[path.resolve()]} ({out})")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def clean_stale_staging(directory: Path) -> list[Path]:
    """Remove staging directories in `directory` left by processes that no longer run here."""
    removed: list[Path] = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _STAGING_RE.match(entry.name)
        if not match or not entry.is_dir() or match.group(2) != _HOST:
            continue
        pid = int(match.group(1))
        if pid != os.getpid() and not _pid_alive(pid):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def staging_stem(name: str) -> str:
    """`name` as it goes into a staging folder's name: itself when short and plain (ASCII
    letters, digits, `._+-`), else an ASCII stem of it and a hash of its bytes, so that any
    legal output name (255 bytes, not UTF-8, with spaces or newlines) stages, and
    `clean_stale_staging` recognises the folder."""
    if _PLAIN_NAME.fullmatch(name):
        return name
    raw = os.fsencode(name)
    stem = re.sub(r"[^A-Za-z0-9._+-]", "_", raw[:32].decode("ascii", "replace"))
    return f"{stem}~{hashlib.sha256(raw).hexdigest()[:16]}"


def staging_prefix(out: Path, kind: str = "") -> str:
    """`.NAME.export-gelu-PID@HOST.[KIND.]`: what `clean_stale_staging` recognises."""
    return f".{staging_stem(out.name)}.{STAGING_TAG}-{os.getpid()}@{_HOST}.{kind}"


@contextlib.contextmanager
def naming_output(path: Path, staging: Path | None = None) -> Iterator[None]:
    """An OSError raised inside without a file name (a refused `write`, `fsync`), or naming
    a file in the hidden `staging` folder, is raised again naming `path`: the message says
    which output the disk refused (errors.py maps it to exit 2)."""
    try:
        yield
    except OSError as exc:
        if exc.errno is None:  # numpy, onnx_ir: "N requested and M written", no errno
            raise WorldError(f"writing {printable(path)}: the file system took only part of a "
                             f"write ({exc}); is the disk full, or a file-size limit "
                             "(ulimit -f) set?") from exc
        if exc.filename is None or _inside(exc.filename, staging):
            raise OSError(exc.errno, exc.strerror or os.strerror(exc.errno),
                          printable(path)) from exc
        raise


def _inside(filename: object, folder: Path | None) -> bool:
    if folder is None or not isinstance(filename, (str, bytes, os.PathLike)):
        return False
    return Path(os.fsdecode(filename)).is_relative_to(folder)


@contextlib.contextmanager
def staging_dir(out: Path) -> Iterator[Path]:
    """A hidden directory beside `out`, named after this process, removed whatever happens."""
    clean_stale_staging(out.parent)
    tmp: Path | None = None
    try:
        # Signals held while the folder is made and named: one arriving between mkdir and
        # the assignment would otherwise leave it behind (its handler raises right there).
        with signals_deferred(), naming_output(out, out.parent):
            tmp = Path(tempfile.mkdtemp(prefix=staging_prefix(out), dir=out.parent))
        with naming_output(out, tmp):
            yield tmp
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM (delivered on exit) so a multi-file commit is not cut in half."""
    sigs = {signal.SIGINT, signal.SIGTERM}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_if_there(path: Path) -> None:
    """Remove `path` if it exists (a name too long to exist, e.g. NAME.data beside a
    255-byte NAME, does not)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise


#: The files (and folders) placed so far by each `all_or_nothing` block that is open.
_PLACED: list[list[Path]] = []


def placed(path: Path) -> None:
    """Record that `path` was just renamed into place (removed again if the run fails)."""
    for files in _PLACED:
        files.append(path)


@contextlib.contextmanager
def all_or_nothing() -> Iterator[None]:
    """A run's writes as one: every output the block placed (through `commit_renames`, a plot, a
    bundle) is removed again when the block raises (bad input, the world's refusal, a bug,
    a signal), so a run that fails leaves nothing it planned to write. The previous file of
    that name, which the run replaced, is gone too."""
    files: list[Path] = []
    _PLACED.append(files)
    try:
        yield
    except BaseException:
        with signals_deferred():
            for path in reversed(files):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        _remove_if_there(path)
        raise
    finally:
        del _PLACED[next(i for i, f in enumerate(_PLACED) if f is files)]  # by identity


def commit_renames(moves: list[tuple[Path, Path]], remove_first: list[Path],
            remove_after: list[Path]) -> None:
    """Renames in order, with removals before/after; signals held throughout."""
    with signals_deferred():
        for path in remove_first:
            _remove_if_there(path)
        for src, dst in moves:
            os.replace(src, dst)
            placed(dst)
        for path in remove_after:
            _remove_if_there(path)
        with contextlib.suppress(OSError):
            _fsync(moves[-1][1].parent)


@contextlib.contextmanager
def written_file(out: Path) -> Iterator[Path]:
    """A staged path to write `out`'s content to; when the block ends without an error, the
    file is fsynced and renamed onto `out` (with signals held) and recorded as placed by
    this run. On an error nothing is left."""
    with staging_dir(out) as tmp:
        staged = tmp / out.name
        yield staged
        _fsync(staged)
        commit_renames([(staged, out)], remove_first=[], remove_after=[])


def write_text_atomic(text: str, out: Path) -> None:
    """Write a text file (a report) whole or not at all."""
    check_output_name(out)
    with written_file(out) as staged:
        staged.write_text(text, encoding="utf-8")
