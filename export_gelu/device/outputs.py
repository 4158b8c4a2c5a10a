"""What a device hands back: trtexec's `--exportOutput` / `--exportTimes` JSON and
polygraphy's `--save-outputs` JSON, read into arrays and latency.

trtexec writes its output file by hand (samples/common/sampleReporting.cpp, exportJSONOutput,
identical in form from 7.0 to 11.x):

    [
      { "name" : "y"
      , "dimensions" : "2x32"
      , "values" : [ 0.1, -0.2, nan, inf ]
      }
    , { "name" : ... }
    ]

values are printed with `operator<<` (6 significant digits; non-finite values as the C
library prints them: nan, -nan, inf, -inf), dimensions joined by 'x' ("" for a scalar).
--exportTimes (exportJSONTrace) writes one object per inference with `startComputeMs`,
`computeMs` and `latencyMs` among its keys (h2d/d2h or in/out fields vary by version);
before 8.6 the warm-up inferences are in it too.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from pathlib import Path

import numpy as np

from export_gelu.bounded_json import MAX_DEPTH, nesting_depth, parse_json
from export_gelu.errors import BadInputError
from export_gelu.shown import shown
from export_gelu.untrusted_files import (
    JSON_BYTES,
    OUTPUTS_BYTES,
    UntrustedFolder,
    checked_dict,
    checked_number,
)

#: One pass over trtexec's text: a string literal (one left open runs to the end, so the scan
#: never starts again inside it), or a C library spelling of a non-finite float outside one
#: (`nan`, `-inf`, `nan(0x7fc00000)`: the parenthesised part bounded, so no `nan(` makes the
#: scan quadratic). Linear in the text: 1 MB of `nan(` in ~0.1 s (it took minutes).
_TOKENS = re.compile(r'("[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z))'
                     r'|(?<![\w.])(-?)(nan|inf)(?:\(\w{0,64}\))?(?![\w"(])',
                     re.IGNORECASE | re.DOTALL)
#: trtexec's dimensions: "" (a scalar) or AxBxC, at most 64 axes of at most 12 digits.
_DIMS = re.compile(r"(\d{1,12}(?:x\d{1,12}){0,63})?")


def _jsonable(text: str) -> str:
    """trtexec's text with nan/inf spelled as JSON strings (only outside quoted names)."""
    def swap(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return m.group(1)
        return f'"{m.group(2)}{m.group(3).lower()}"'

    return _TOKENS.sub(swap, text)


def _value(v: object) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v.lstrip("-") in ("nan", "inf"):
        return float(v)
    raise ValueError(f"value {shown(repr(v), 40)} is not a number")


def _dims(text: object, name: str, path: object) -> tuple[int, ...]:
    if not isinstance(text, str) or not _DIMS.fullmatch(text):
        raise BadInputError(f"--device-outputs {path}: output {shown(repr(name))} has "
                            f"dimensions {shown(repr(text), 40)}, not trtexec's AxBxC form")
    return tuple(int(d) for d in text.split("x")) if text else ()


def read_trtexec_outputs(path: object, text: str) -> OrderedDict[str, np.ndarray]:
    """Outputs from trtexec --exportOutput (exit 2 on a truncated or malformed file, or one
    nested deeper than any trtexec writes)."""
    data = parse_json(_jsonable(text), f"--device-outputs {path}", max_bytes=4 * OUTPUTS_BYTES,
                      hint="; the file may be truncated")
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise BadInputError(f"--device-outputs {path}: expected trtexec's list of "
                            "{name, dimensions, values}")
    out: OrderedDict[str, np.ndarray] = OrderedDict()
    for i, entry in enumerate(data):
        if not {"name", "dimensions", "values"} <= set(entry):
            raise BadInputError(f"--device-outputs {path}: an entry lacks name, dimensions or "
                                f"values (keys: {', '.join(shown(k, 40) for k in entry)})")
        if not isinstance(entry["name"], str):
            raise BadInputError(f"--device-outputs {path}: [{i}].name is not a string")
        name = entry["name"]
        dims = _dims(entry["dimensions"], name, path)
        values = entry["values"]
        if not isinstance(values, list):
            raise BadInputError(f"--device-outputs {path}: output {shown(repr(name))}: values "
                                "is not a list")
        count = math.prod(dims)
        if len(values) != count:
            raise BadInputError(f"--device-outputs {path}: output {shown(repr(name))} has "
                                f"{len(values)} values for dimensions "
                                f"{entry['dimensions'] or 'scalar'} ({count}); the file is "
                                "truncated or inconsistent")
        try:
            arr = np.array([_value(v) for v in values], dtype=np.float64)
        except ValueError as exc:
            raise BadInputError(f"--device-outputs {path}: output {shown(repr(name))}: {exc}"
                                ) from exc
        if name in out:
            raise BadInputError(f"--device-outputs {path}: output {shown(repr(name))} appears "
                                "twice")
        out[name] = arr.reshape(dims)
    if not out:
        raise BadInputError(f"--device-outputs {path}: holds no outputs")
    return out


def read_polygraphy_outputs(path: object, text: str) -> list[OrderedDict[str, np.ndarray]]:
    """Outputs per iteration from polygraphy --save-outputs (the last runner's results); its
    nesting bounded before polygraphy parses it."""
    from polygraphy.comparator import RunResults

    from export_gelu.check.runners.quiet import quiet_polygraphy

    depth = nesting_depth(text.encode("utf-8", "surrogatepass"))
    if depth > MAX_DEPTH:
        raise BadInputError(f"--device-outputs {path}: JSON nested {depth} levels deep (at "
                            f"most {MAX_DEPTH} are read); refusing to parse it")
    try:
        with quiet_polygraphy():
            results = RunResults.from_json(text)
    except Exception as exc:  # noqa: BLE001 - JSON, base64 and polygraphy errors alike
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise BadInputError(f"--device-outputs {path}: not a polygraphy outputs file "
                            f"({shown(first)}); the file may be truncated") from exc
    if not isinstance(results, RunResults) or not len(results):
        raise BadInputError(f"--device-outputs {path}: holds no runner's results")
    _runner, iterations = list(results.items())[-1]
    if not iterations:
        raise BadInputError(f"--device-outputs {path}: holds no iterations")
    feeds = []
    for i, it in enumerate(iterations):
        row: OrderedDict[str, np.ndarray] = OrderedDict()
        for name, value in it.items():
            if not isinstance(name, str) or not isinstance(value, np.ndarray) \
                    or value.dtype.kind not in "biuf":
                raise BadInputError(f"--device-outputs {path}: iteration {i}: output "
                                    f"{shown(repr(name))} is not a numeric array")
            row[name] = value
        feeds.append(row)
    return feeds


def _source(path: str | Path, flag: str, folder: UntrustedFolder | None
            ) -> tuple[UntrustedFolder, str]:
    """(folder, name) of a device file: `path` inside `folder`, or the file the user named."""
    if folder is not None:
        return folder, str(path)
    return UntrustedFolder.of_file(path, flag)


def read_device_outputs(path: str | Path, *, folder: UntrustedFolder | None = None
                        ) -> tuple[list[OrderedDict[str, np.ndarray]], str]:
    """(outputs per iteration, 'trtexec' | 'polygraphy') from either tool's JSON. `path`:
    inside `folder` (a device folder), else the file the user named (read by the same rule:
    a regular file, no link, at most OUTPUTS_BYTES)."""
    where, rel = _source(path, "--device-outputs", folder)
    shown_path = where.path / rel
    if not where.is_file(rel):
        raise BadInputError(f"--device-outputs {shown_path}: no such file")
    raw = where.read_bytes(rel, max_bytes=OUTPUTS_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"--device-outputs {shown_path}: not a text file") from exc
    if not text.strip():
        raise BadInputError(f"--device-outputs {shown_path}: empty file")
    if text.lstrip().startswith("["):
        return [read_trtexec_outputs(shown_path, text)], "trtexec"
    return read_polygraphy_outputs(shown_path, text), "polygraphy"


def read_device_times(path: str | Path, warmup_ms: float | None, *,
                      folder: UntrustedFolder | None = None) -> tuple[list[float], int]:
    """(GPU compute ms per timed inference in run order, warm-up entries dropped) from
    trtexec --exportTimes; entries starting before `warmup_ms` are warm-up runs. Every
    `computeMs` and `startComputeMs` must be finite and >= 0 (exit 2 naming it)."""
    where, rel = _source(path, "--device-times", folder)
    shown_path = where.path / rel
    if not where.is_file(rel):
        raise BadInputError(f"--device-times {shown_path}: no such file")
    raw = where.read_bytes(rel, max_bytes=JSON_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"--device-times {shown_path}: not a text file") from exc
    data = parse_json(_jsonable(text), f"--device-times {shown_path}",
                      max_bytes=4 * JSON_BYTES, hint="; the file may be truncated")
    if not isinstance(data, list) or not data or not all(isinstance(d, dict) for d in data):
        raise BadInputError(f"--device-times {shown_path}: expected trtexec's --exportTimes "
                            "list of per-inference objects")
    times, dropped = [], 0
    for i, entry in enumerate(data):
        entry = checked_dict(entry, f"--device-times {shown_path}: [{i}]")
        if "computeMs" not in entry:
            raise BadInputError(f"--device-times {shown_path}: an entry has no computeMs "
                                f"(keys: {', '.join(shown(k, 40) for k in entry)})")
        ms = checked_number(entry["computeMs"], f"--device-times {shown_path}: [{i}].computeMs")
        if warmup_ms and "startComputeMs" in entry:
            start = checked_number(entry["startComputeMs"],
                                   f"--device-times {shown_path}: [{i}].startComputeMs")
            if start < warmup_ms:
                dropped += 1
                continue
        times.append(ms)
    if not times:
        raise BadInputError(f"--device-times {shown_path}: no timed inferences after the "
                            "warm-up")
    return times, dropped


#: trtexec from 8.0 logs "[I] TensorRT version: 8.2.1" (trtexec.cpp at 8.2.1) and its test
#: banner "&&&& RUNNING TensorRT.trtexec [TensorRT v8201]" (logging.h defineTest, from 8.0.1).
_LOG_VERSION = re.compile(r"TensorRT version: (\d{1,4})\.(\d{1,4})\.(\d{1,4})")
_LOG_BANNER = re.compile(r"\[TensorRT v(\d{1,8})\]")


def trtexec_log_version(folder: UntrustedFolder, rel: str) -> str | None:
    """The TensorRT version a trtexec log names ('8.2.1'), or None (7.x logs do not say):
    read from the log's head only (HEAD_BYTES), by the device folder's rule."""
    from export_gelu.untrusted_files import HEAD_BYTES

    text = folder.head_text(rel, HEAD_BYTES)
    found = _LOG_VERSION.search(text)
    if found:
        return ".".join(found.groups())
    banner = _LOG_BANNER.search(text)
    if banner:
        code = int(banner.group(1))  # MAJOR*1000 + MINOR*100 + PATCH (NV_TENSORRT_VERSION)
        return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"
    return None
