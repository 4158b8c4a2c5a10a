"""One parse of an ONNX file's structure per run: `read_structure(path)` is the file's graph
without its external weights, parsed the first time it is asked for and handed out again
while the file on disk is unchanged (same inode, size and modification time).

Detection, the output plan, the external-data check, input planning, vocabulary reading and
the weights loader all read the same input file; before this they parsed it ten times in one
`--no-verify` export of an ONNX input. The proto returned is shared: callers read it and
never change it (`copy_structure` gives one to change).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import onnx

_CACHED_FILES = 4


def _identity(path: Path) -> tuple[str, int, int, int, int]:
    stat = os.stat(path)
    return (os.fspath(path.resolve()), stat.st_dev, stat.st_ino, stat.st_size,
            stat.st_mtime_ns)


@functools.lru_cache(maxsize=_CACHED_FILES)
def _parsed(identity: tuple[str, int, int, int, int]) -> onnx.ModelProto:
    with open(identity[0], "rb") as fh:
        return onnx.load_model(fh, load_external_data=False)


def read_structure(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """`path` parsed without its external data: shared, read-only. Raises what
    `onnx.load_model` raises on a file that does not parse (and OSError on one that cannot
    be read)."""
    return _parsed(_identity(Path(path)))


def copy_structure(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """`read_structure(path)` as a copy the caller may change."""
    model = onnx.ModelProto()
    model.CopyFrom(read_structure(path))
    return model


def forget_parsed() -> None:
    """Drop every parsed file (a long-lived process that rewrites files in place within the
    same clock tick can call this between runs)."""
    _parsed.cache_clear()
