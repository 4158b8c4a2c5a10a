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

import json
import math
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from export_gelu.errors import BadInputError

#: C library spellings of non-finite floats, as JSON cannot hold them.
_NONFINITE = re.compile(r"(?<![\w.\"])(-?)(nan|inf)(?:\([^)]*\))?(?![\w\"])", re.IGNORECASE)


def _jsonable(text: str) -> str:
    """trtexec's text with nan/inf spelled as JSON strings (only outside quoted names)."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', text)
    for i in range(0, len(parts), 2):  # even parts are outside string literals
        parts[i] = _NONFINITE.sub(lambda m: f'"{m.group(1)}{m.group(2).lower()}"', parts[i])
    return "".join(parts)


def _value(v: Any) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v.lstrip("-") in ("nan", "inf"):
        return float(v)
    raise ValueError(f"value {v!r} is not a number")


def _dims(text: Any, name: str, path: Path) -> tuple[int, ...]:
    if not isinstance(text, str) or not re.fullmatch(r"(\d+(x\d+)*)?", text):
        raise BadInputError(f"--device-outputs {path}: output {name!r} has dimensions "
                            f"{text!r}, not trtexec's AxBxC form")
    return tuple(int(d) for d in text.split("x")) if text else ()


def read_trtexec_outputs(path: Path, text: str) -> OrderedDict[str, np.ndarray]:
    """Outputs from trtexec --exportOutput (exit 2 on a truncated or malformed file)."""
    try:
        data = json.loads(_jsonable(text))
    except json.JSONDecodeError as exc:
        raise BadInputError(f"--device-outputs {path}: not complete JSON ({exc.msg} at line "
                            f"{exc.lineno}); the file may be truncated") from exc
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise BadInputError(f"--device-outputs {path}: expected trtexec's list of "
                            "{name, dimensions, values}")
    out: OrderedDict[str, np.ndarray] = OrderedDict()
    for entry in data:
        if not {"name", "dimensions", "values"} <= set(entry):
            raise BadInputError(f"--device-outputs {path}: an entry lacks name, dimensions or "
                                f"values (keys: {', '.join(entry)})")
        name = str(entry["name"])
        dims = _dims(entry["dimensions"], name, path)
        values = entry["values"]
        if not isinstance(values, list):
            raise BadInputError(f"--device-outputs {path}: output {name!r}: values is not a list")
        count = math.prod(dims)
        if len(values) != count:
            raise BadInputError(f"--device-outputs {path}: output {name!r} has {len(values)} "
                                f"values for dimensions {entry['dimensions'] or 'scalar'} "
                                f"({count}); the file is truncated or inconsistent")
        try:
            arr = np.array([_value(v) for v in values], dtype=np.float64)
        except ValueError as exc:
            raise BadInputError(f"--device-outputs {path}: output {name!r}: {exc}") from exc
        if name in out:
            raise BadInputError(f"--device-outputs {path}: output {name!r} appears twice")
        out[name] = arr.reshape(dims)
    if not out:
        raise BadInputError(f"--device-outputs {path}: holds no outputs")
    return out


def read_polygraphy_outputs(path: Path) -> list[OrderedDict[str, np.ndarray]]:
    """Outputs per iteration from polygraphy --save-outputs (the last runner's results)."""
    from polygraphy.comparator import RunResults

    from export_gelu.check.quiet import quiet_polygraphy

    try:
        with quiet_polygraphy():
            results = RunResults.load(str(path))
    except Exception as exc:  # noqa: BLE001 - JSON, base64 and polygraphy errors alike
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise BadInputError(f"--device-outputs {path}: not a polygraphy outputs file "
                            f"({first}); the file may be truncated") from exc
    if not len(results):
        raise BadInputError(f"--device-outputs {path}: holds no runner's results")
    _runner, iterations = list(results.items())[-1]
    if not iterations:
        raise BadInputError(f"--device-outputs {path}: holds no iterations")
    return [OrderedDict((k, np.asarray(v)) for k, v in it.items()) for it in iterations]


def read_device_outputs(path: str | Path) -> tuple[list[OrderedDict[str, np.ndarray]], str]:
    """(outputs per iteration, 'trtexec' | 'polygraphy') from either tool's JSON."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError(f"--device-outputs {path}: no such file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"--device-outputs {path}: not a text file") from exc
    if not text.strip():
        raise BadInputError(f"--device-outputs {path}: empty file")
    if text.lstrip().startswith("["):
        return [read_trtexec_outputs(path, text)], "trtexec"
    return read_polygraphy_outputs(path), "polygraphy"


def read_device_times(path: str | Path, warmup_ms: float | None) -> tuple[list[float], int]:
    """(GPU compute ms per timed inference in run order, warm-up entries dropped) from
    trtexec --exportTimes; entries starting before `warmup_ms` are warm-up runs."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError(f"--device-times {path}: no such file")
    try:
        data = json.loads(_jsonable(path.read_text()))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInputError(f"--device-times {path}: not complete JSON ({exc}); the file may "
                            "be truncated") from exc
    if not isinstance(data, list) or not data or not all(isinstance(d, dict) for d in data):
        raise BadInputError(f"--device-times {path}: expected trtexec's --exportTimes list of "
                            "per-inference objects")
    times, dropped = [], 0
    for entry in data:
        if "computeMs" not in entry:
            raise BadInputError(f"--device-times {path}: an entry has no computeMs (keys: "
                                f"{', '.join(entry)})")
        if warmup_ms and float(entry.get("startComputeMs", warmup_ms)) < warmup_ms:
            dropped += 1
            continue
        times.append(float(entry["computeMs"]))
    if not times:
        raise BadInputError(f"--device-times {path}: no timed inferences after the warm-up")
    return times, dropped


#: trtexec from 8.0 logs "[I] TensorRT version: 8.2.1" (trtexec.cpp at 8.2.1) and its test
#: banner "&&&& RUNNING TensorRT.trtexec [TensorRT v8201]" (logging.h defineTest, from 8.0.1).
_LOG_VERSION = re.compile(r"TensorRT version: (\d+)\.(\d+)\.(\d+)")
_LOG_BANNER = re.compile(r"\[TensorRT v(\d+)\]")


def trtexec_log_version(log: Path) -> str | None:
    """The TensorRT version a trtexec log names ('8.2.1'), or None (7.x logs do not say)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    found = _LOG_VERSION.search(text)
    if found:
        return ".".join(found.groups())
    banner = _LOG_BANNER.search(text)
    if banner:
        code = int(banner.group(1))  # MAJOR*1000 + MINOR*100 + PATCH (NV_TENSORRT_VERSION)
        return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"
    return None
