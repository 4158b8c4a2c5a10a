"""Paths that C++ libraries (torch, onnx, ONNX Runtime) can take.

They take a path as UTF-8 text, while a POSIX file name is any bytes. A name that is not
UTF-8 (Python holds it with surrogate escapes) is handed over another way: as a file object
or the file's bytes, or, for a folder, as a symlink with an ASCII name that points at it
(`utf8_alias`), removed when the process exits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_ALIASES: dict[str, str] = {}


def utf8_path(path: str | os.PathLike[str]) -> str | None:
    """`path` as text C++ can take, or None when its bytes are not UTF-8."""
    text = os.fspath(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return text


def utf8_alias(folder: str | os.PathLike[str]) -> str:
    """`folder` itself when its name is UTF-8; else an ASCII-named symlink to it (one per
    folder, in a private temporary folder removed at exit)."""
    text = utf8_path(folder)
    if text is not None:
        return text
    key = os.fspath(folder)
    if key not in _ALIASES:
        holder = tempfile.mkdtemp(prefix="export-gelu-alias-")
        atexit.register(shutil.rmtree, holder, True)
        link = Path(holder) / "folder"
        link.symlink_to(Path(key).resolve(), target_is_directory=True)
        _ALIASES[key] = str(link)
    return _ALIASES[key]
