"""Errors, and the one mapping from whatever ended a run to its exit code and one-line message.

Exit codes (README "Exit codes"): 0 done, 1 parity failed, 2 bad input or usage, or the world
refused (a full disk, a file-size limit, a read-only or missing folder, a name too long), 3 the
target cannot be met or an optional package is missing, 4 only for export-gelu's own bugs,
128 + N for a signal (130 Ctrl-C, 143 SIGTERM). `failure_outcome` is the only place that
decides; the CLI prints what it returns.
"""

from __future__ import annotations

import errno
import os
import re
import signal
from dataclasses import dataclass

from export_gelu.shown import terminal


class ExportGeluError(Exception):
    """Base class: a message meant for the user, and the exit code it maps to."""

    exit_code = 2


class BadInputError(ExportGeluError):
    """The model file, an input spec or a flag is unusable (exit 2)."""

    exit_code = 2


class TargetUnmetError(ExportGeluError):
    """The target cannot be met: an op, opset or feature it lacks (exit 3)."""

    exit_code = 3


class WorldError(ExportGeluError):
    """The machine or file system refused what the run needed, with no errno to name it
    (a write that stored only part of its bytes): exit 2, like an OSError from the world."""

    exit_code = 2


class OutOfMemory(WorldError):
    """A stage ran out of memory (Python's MemoryError, ONNX Runtime's or torch's failed
    allocation): exit 2 naming the stage and what to try."""


#: Words ONNX Runtime, torch and the C++ runtime use for a failed allocation.
_OOM_WORDS = ("Failed to allocate memory", "std::bad_alloc", "bad_alloc", "out of memory",
              "can't allocate memory", "Cannot allocate memory", "OutOfMemory")
_OOM_BYTES = re.compile(r"(?:buffer of size|allocate) (\d{4,})")


def out_of_memory(exc: BaseException) -> str | None:
    """What ran out when `exc` is a failed allocation (`could not allocate 4.0 TiB`,
    `MemoryError`), else None; ONNX Runtime and torch raise RuntimeError-like errors that
    say so only in their text."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return type(exc).__name__
    if isinstance(exc, (ExportGeluError, KeyboardInterrupt)) or not isinstance(exc, Exception):
        return None
    text = str(exc)
    if not any(word.lower() in text.lower() for word in _OOM_WORDS):
        return None
    size = _OOM_BYTES.search(text)
    if size is None:
        return f"{type(exc).__name__}: a failed allocation"
    amount, units = float(size.group(1)), ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    while amount >= 1024 and len(units) > 1:
        amount, units = amount / 1024, units[1:]
    return f"could not allocate {amount:.1f} {units[0]}"


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM: unwinds like Ctrl-C so staging files are removed on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: errno values that say the machine or the file system refused, not that export-gelu erred:
#: the run cannot succeed as asked, and the user (not a bug report) can change that.
WORLD_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EFBIG", "EDQUOT", "EROFS", "EACCES", "EPERM", "ENAMETOOLONG", "EBUSY", "EXDEV",
    "EIO", "ENOENT", "ENOTDIR", "EISDIR", "ELOOP", "EEXIST", "ENOTEMPTY", "EMFILE", "ENFILE",
    "ENOMEM", "ETXTBSY", "ESTALE", "ENODEV", "ENXIO", "EAGAIN", "EINTR", "EPIPE", "ENOLCK",
    "EOVERFLOW", "EMLINK", "ETIMEDOUT", "ECONNRESET", "ENOTCONN", "EREMOTEIO", "ESPIPE")
    if hasattr(errno, name))

#: Optional dependencies: a command that cannot run without one says so (exit 3, no traceback).
OPTIONAL_MODULES = {"onnxruntime": "pip install 'export-gelu[cpu]' (or 'export-gelu[gpu]' on a "
                                   "CUDA machine; never both)",
                    "tensorrt": "pip install 'export-gelu[trt]' on a machine with a CUDA GPU",
                    "matplotlib": "pip install 'export-gelu[plot]'"}

PROG = "export-gelu"


@dataclass(frozen=True)
class Outcome:
    """How a run that raised ends: the exit code, the one line for stderr, and whether the
    traceback is worth showing under --debug (never for a signal)."""

    code: int
    line: str
    traceback: bool = True


def one_line(text: object, limit: int | None = None) -> str:
    """`text` with every run of whitespace (newlines included) as one space."""
    flat = " ".join(str(text).split())
    return flat if limit is None else flat[:limit]


#: First lines that only say where an error happened; its cause is stated further down.
_WRAPPER_LINES = ("The following operation failed in the TorchScript interpreter",
                  "Traceback of TorchScript")
_STATED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception):\s*\S")


def stated_cause(text: object) -> str:
    """The line of an exception's text that states its cause: the first line, unless that
    only says where it failed (a TorchScript interpreter error puts "The following operation
    failed in the TorchScript interpreter" first and `RuntimeError: <cause>` last); then the
    last `SomeError: …` line."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].startswith(_WRAPPER_LINES):
        stated = [line for line in lines[1:] if _STATED.match(line)]
        if stated:
            return stated[-1]
    return lines[0]


def _path_text(path: object) -> str:
    """A path as the user typed it, printable even when it is not UTF-8."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return str(path).encode("utf-8", "backslashreplace").decode("utf-8")


def world_error_line(exc: OSError) -> str:
    """`<what the OS said>: <path>` (and `-> <path>` for a rename), e.g.
    `No space left on device (ENOSPC): out/model.onnx.data`."""
    code = errno.errorcode.get(exc.errno or 0, "")
    words = exc.strerror or os.strerror(exc.errno or 0)
    words = f"{words} ({code})" if code else words
    paths = [_path_text(p) for p in (exc.filename, exc.filename2) if p is not None]
    return f"{words}: {' -> '.join(paths)}" if paths else words


def missing_optional(exc: BaseException) -> tuple[str, str] | None:
    """(module, how to install) when `exc` is an optional dependency's ImportError."""
    if isinstance(exc, ImportError) and exc.name:
        root = exc.name.split(".")[0]
        if root in OPTIONAL_MODULES:
            return root, OPTIONAL_MODULES[root]
    return None


def _world_oserror(exc: BaseException) -> OSError | None:
    """The OSError (this one, or one it was raised from) that the world caused, if any."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in WORLD_ERRNOS:
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


def is_world_fault(exc: BaseException) -> bool:
    """Whether `exc` is the world's refusal (a world errno, or a WorldError): code that
    turns failures into "this exporter cannot" must let these through."""
    return isinstance(exc, WorldError) or _world_oserror(exc) is not None


def failure_outcome(exc: BaseException, prog: str = PROG) -> Outcome:
    """The exit code and message for whatever a command raised; its line holds no control
    character (shown.terminal: a name from a model or a device, quoted in it, is text)."""
    outcome = _outcome(exc, prog)
    return Outcome(outcome.code, terminal(outcome.line), outcome.traceback)


def _outcome(exc: BaseException, prog: str) -> Outcome:
    if isinstance(exc, KeyboardInterrupt):
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        return Outcome(128 + int(signum), interrupted_line(signum, prog), traceback=False)
    if isinstance(exc, ExportGeluError):
        return Outcome(exc.exit_code, f"{prog}: error: {one_line(exc)}")
    world = _world_oserror(exc)
    if world is not None:
        return Outcome(2, f"{prog}: error: {world_error_line(world)}")
    if isinstance(exc, MemoryError):
        return Outcome(2, f"{prog}: error: out of memory ({one_line(exc, 200) or 'MemoryError'})"
                          "; free memory or use a machine with more")
    missing = missing_optional(exc)
    if missing:
        return Outcome(3, f"{prog}: error: this command needs {missing[0]}, which is not "
                          f"installed here ({missing[1]})")
    text = str(exc).strip()
    if text.startswith(_WRAPPER_LINES):
        text = stated_cause(text).removeprefix(f"{type(exc).__name__}: ")
    return Outcome(4, f"{prog}: internal error: {type(exc).__name__}: {one_line(text, 500)} "
                      "(run again with --debug for the traceback)")


def interrupted_line(signum: int, prog: str = PROG) -> str:
    return (f"{prog}: interrupted ({signal.Signals(signum).name}); no output was left "
            "half-written")
