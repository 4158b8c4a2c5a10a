"""Files read from a folder someone else filled: a device bundle, or what a device handed back.

The box that runs a bundle is often shared (a lab Jetson, a CI runner), and what it hands back
is copied with `rsync -a`, `tar` or `scp`, which keep symlinks. So every file read from such a
folder goes through one rule (docs/safety.md, "What comes back from a device"):

- it is named relative to the folder, by a path with no `..`, no absolute start, no NUL and
  no backslash;
- at open time its real path (every link on the way resolved) lies inside the folder's real
  path, the file itself is no symbolic link (`O_NOFOLLOW`), it is a regular file (no FIFO,
  device or folder), and where the system tells (`/proc/self/fd`) the file actually opened
  lies inside the folder too;
- it is read with a size bound (a file over it is refused unread), or only its head or tail;
- JSON goes through the depth-bounded reader (bounded_json.py);
- the values read are checked for type and range by the `checked_*` helpers.

A refusal is exit 2 naming the folder, the file and, for a value, the field.
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from export_gelu.bounded_json import MAX_DEPTH, parse_json
from export_gelu.errors import BadInputError
from export_gelu.shown import printable, shown

#: JSON a device hands back about a run (manifest, times): far more than any holds.
JSON_BYTES = 64 << 20
#: trtexec's --exportOutput / polygraphy's --save-outputs: text of up to ~25 M values.
OUTPUTS_BYTES = 256 << 20
#: Where only a line is wanted (build_failed.txt's last lines, a log's version line).
TAIL_BYTES = 64 << 10
HEAD_BYTES = 4 << 20
_CHUNK = 1 << 20
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class UntrustedFolder:
    """A folder whose files someone else wrote. `flag` and `kind` are how messages name it
    (`--bundle B`, "bundle")."""

    def __init__(self, path: str | os.PathLike[str], flag: str, kind: str = "folder") -> None:
        self.path = Path(path)
        self.flag = flag
        self.kind = kind
        self.real = os.path.realpath(self.path)

    @classmethod
    def of_file(cls, path: str | os.PathLike[str], flag: str) -> tuple[UntrustedFolder, str]:
        """(the folder `path` lies in, its name there): a file the user named, read by the
        same rule as its siblings."""
        path = Path(path)
        if not path.name or path.name in (".", ".."):
            raise BadInputError(f"{flag} {printable(path)}: not a file name")
        return cls(path.parent, flag, "folder"), path.name

    # -- names -----------------------------------------------------------------------------

    def where(self, rel: str, field: str = "") -> str:
        """`--bundle B: manifest.json` (with `: field` when a value is meant)."""
        name = shown(rel) if rel else "."
        return f"{self.flag} {printable(self.path)}: {name}" + (f": {field}" if field else "")

    def check_name(self, rel: object, field: str = "", source: str = "") -> str:
        """`rel` as a path inside the folder (a str, relative, no `..`, no NUL, no backslash),
        else exit 2 naming `source` (the file that gave it) and `field`."""
        if (not isinstance(rel, str) or not rel or "\x00" in rel or "\\" in rel
                or rel.startswith("/") or ".." in PurePosixPath(rel).parts):
            said = self.where(source, field) if source else self.where(shown(str(rel)))
            raise BadInputError(f"{said}: {shown(repr(rel))} is not a path inside the "
                                f"{self.kind} (a relative name without '..'); refusing to "
                                "read it")
        return PurePosixPath(rel).as_posix()

    def real_path(self, rel: str, field: str = "", source: str = "") -> Path:
        """`rel`'s real path (every link resolved), which must lie inside the folder."""
        rel = self.check_name(rel, field, source)
        real = os.path.realpath(self.path / rel)
        if not _inside(real, self.real):
            raise BadInputError(f"{self.where(rel)}: leads out of the {self.kind} (it resolves "
                                f"to {printable(real)}); refusing to read it")
        return Path(real)

    # -- what is there ---------------------------------------------------------------------

    def _lstat(self, rel: str) -> os.stat_result | None:
        try:
            return os.lstat(self.path / self.check_name(rel))
        except OSError:
            return None

    def is_file(self, rel: str) -> bool:
        """Whether `rel` exists as an entry that is not a folder (a link counts: reading it
        is then refused, never skipped in silence)."""
        st = self._lstat(rel)
        return st is not None and not stat.S_ISDIR(st.st_mode)

    def is_dir(self, rel: str) -> bool:
        """Whether `rel` is a folder inside the folder (a link to one is not)."""
        st = self._lstat(rel)
        return st is not None and stat.S_ISDIR(st.st_mode) and _inside(
            os.path.realpath(self.path / rel), self.real)

    def names(self, rel: str = "") -> list[str]:
        """The entries of the sub-folder `rel` ("" for the folder itself), sorted."""
        folder = self.path / self.check_name(rel) if rel else self.path
        if rel and not self.is_dir(rel):
            raise BadInputError(f"{self.where(rel)}: not a folder inside the {self.kind}")
        try:
            return sorted(os.listdir(folder))
        except OSError as exc:
            raise BadInputError(f"{self.where(rel)}: cannot list it ({exc.strerror or exc})"
                                ) from exc

    # -- reading ---------------------------------------------------------------------------

    @contextmanager
    def open(self, rel: str, *, max_bytes: int | None, field: str = "",
             source: str = "") -> Iterator[BinaryIO]:
        """`rel` opened for reading by the module's rule; `max_bytes` None: any size (the
        caller reads a bounded part)."""
        rel = self.check_name(rel, field, source)
        self.real_path(rel)
        try:
            fd = os.open(self.path / rel, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise BadInputError(f"{self.where(rel)}: is a symbolic link; what comes back "
                                    "from a device is read only as regular files inside its "
                                    "folder (docs/safety.md)") from exc
            if exc.errno == errno.ENOENT:
                raise BadInputError(f"{self.where(rel)}: no such file") from exc
            raise BadInputError(f"{self.where(rel)}: cannot read it ({exc.strerror or exc})"
                                ) from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise BadInputError(f"{self.where(rel)}: not a regular file; refusing to read "
                                    "it")
            opened = _opened_path(fd)
            if opened is not None and not _inside(opened, self.real):
                raise BadInputError(f"{self.where(rel)}: leads out of the {self.kind} (it "
                                    f"opened {printable(opened)}); refusing to read it")
            if max_bytes is not None and st.st_size > max_bytes:
                raise BadInputError(f"{self.where(rel)}: {st.st_size} bytes, more than the "
                                    f"{max_bytes} such a file may hold; refusing to read it")
            if _O_NONBLOCK:
                os.set_blocking(fd, True)
            fh = os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        with fh:
            yield fh

    def read_bytes(self, rel: str, *, max_bytes: int, field: str = "",
                   source: str = "") -> bytes:
        """The whole of `rel` (at most `max_bytes`: a larger file is refused unread; one
        that grows while read is cut at the bound and refused)."""
        with self.open(rel, max_bytes=max_bytes, field=field, source=source) as fh:
            data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise BadInputError(f"{self.where(rel)}: more than the {max_bytes} bytes such a "
                                "file may hold; refusing to read it")
        return data

    def read_json(self, rel: str, *, max_bytes: int = JSON_BYTES, max_depth: int = MAX_DEPTH,
                  field: str = "", source: str = "") -> Any:
        """`rel` parsed as JSON with bounded size and nesting (bounded_json.py)."""
        data = self.read_bytes(rel, max_bytes=max_bytes, field=field, source=source)
        return parse_json(data, self.where(rel), max_bytes=max_bytes, max_depth=max_depth)

    def head_text(self, rel: str, max_bytes: int = HEAD_BYTES) -> str:
        """The first `max_bytes` of `rel`, as text (undecodable bytes replaced)."""
        with self.open(rel, max_bytes=None) as fh:
            return fh.read(max_bytes).decode("utf-8", "replace")

    def tail_text(self, rel: str, max_bytes: int = TAIL_BYTES) -> str:
        """The last `max_bytes` of `rel`, as text (undecodable bytes replaced): memory and
        time bounded whatever the file's size."""
        with self.open(rel, max_bytes=None) as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - max_bytes))
            return fh.read(max_bytes).decode("utf-8", "replace")

    def sha256(self, rel: str, *, field: str = "", source: str = "") -> str:
        """`rel`'s SHA-256, read in chunks (any size: only the digest is kept)."""
        digest = hashlib.sha256()
        with self.open(rel, max_bytes=None, field=field, source=source) as fh:
            for block in iter(lambda: fh.read(_CHUNK), b""):
                digest.update(block)
        return digest.hexdigest()


def _opened_path(fd: int) -> str | None:
    """The real path of what `fd` opened, where /proc tells (Linux); else None."""
    try:
        return os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None


# -- values: type and range, or exit 2 naming the file and the field -----------------------

def checked_number(value: object, where: str, *, minimum: float | None = 0.0,
                   maximum: float | None = None) -> float:
    """A finite JSON number (no bool) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInputError(f"{where} is {_kind(value)}, not a number")
    number = float(value)
    if not math.isfinite(number):
        raise BadInputError(f"{where} is {number}, not a finite number")
    if minimum is not None and number < minimum:
        raise BadInputError(f"{where} is {number:g}, below {minimum:g}")
    if maximum is not None and number > maximum:
        raise BadInputError(f"{where} is {number:g}, above {maximum:g}")
    return number


def checked_int(value: object, where: str, *, minimum: int = 0,
                maximum: int | None = None) -> int:
    """A JSON integer (no bool) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInputError(f"{where} is {_kind(value)}, not an integer")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"{minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
        raise BadInputError(f"{where} is {value}, not {bound}")
    return value


def checked_str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise BadInputError(f"{where} is {_kind(value)}, not a string")
    return value


def checked_list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise BadInputError(f"{where} is {_kind(value)}, not a list")
    return value


def checked_dict(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadInputError(f"{where} is {_kind(value)}, not an object")
    return value


def _kind(value: object) -> str:
    """A value's JSON kind, with a short, safe view of it."""
    kinds = {bool: "a boolean", str: "a string", list: "a list", dict: "an object",
             type(None): "null", int: "a number", float: "a number"}
    kind = kinds.get(type(value), type(value).__name__)
    return f"{kind} ({shown(repr(value), 40)})" if isinstance(value, (str, bool)) else kind
