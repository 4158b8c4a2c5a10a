"""JSON read from a model file, parsed with bounded size and nesting depth.

A model folder's `config.json`, `preprocessor_config.json`, a weight index or a safetensors
header is the file author's text: nested 50 000 levels deep, Python's parser (and every
recursive walk after it) runs out of stack. The depth is counted before parsing, on the bytes
with their strings taken out, so nothing recursive ever sees a hostile document; a refusal is
exit 2 naming the file.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from export_gelu.errors import BadInputError

#: Deeper than any config, index, header or serialized program has reason to be.
MAX_DEPTH = 200
#: Larger than any config or weight index (a safetensors header is capped by its format).
MAX_BYTES = 64 << 20

#: A string literal; one left open runs to the end, so the scan never starts again inside it
#: (which made `"\"\"\"…` quadratic: 29 s for 40 KB).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def nesting_depth(data: bytes) -> int:
    """How deep `data`'s arrays and objects nest (brackets inside strings do not count)."""
    import numpy as np

    brackets = np.frombuffer(_STRING.sub(b"", data).translate(None, _NOT_BRACKETS), np.uint8)
    if not brackets.size:
        return 0
    steps = np.where((brackets == 0x5B) | (brackets == 0x7B), 1, -1).astype(np.int64)
    return int(np.cumsum(steps).max())


def parse_json(data: bytes | str, source: str | os.PathLike[str], *,
               max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH, hint: str = "") -> Any:
    """`data` parsed as JSON, or exit 2 naming `source` when it is larger than `max_bytes`,
    nests deeper than `max_depth`, or is not JSON (`hint` added to that message)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise BadInputError(f"{source}: {len(raw)} bytes of JSON, more than the {max_bytes} "
                            "a model's file holds; refusing to parse it")
    depth = nesting_depth(raw)
    if depth > max_depth:
        raise BadInputError(f"{source}: JSON nested {depth} levels deep (at most {max_depth} "
                            "are read); refusing to parse it")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadInputError(f"{source}: not valid JSON ({exc}){hint}") from exc


def read_json(path: Path, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON file at `path` (parse_json's bounds; at most `max_bytes` + 1 bytes are read)."""
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    return parse_json(data, path, max_bytes=max_bytes, max_depth=max_depth)
