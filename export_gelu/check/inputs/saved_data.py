"""Input and output files in polygraphy's JSON formats, so a case that
export-gelu checked can be replayed with `polygraphy run --load-inputs/--load-outputs`."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.atomic import written_file
from export_gelu.errors import BadInputError

if TYPE_CHECKING:
    from polygraphy.comparator import RunResults

Feed = OrderedDict  # name → array, in forward() order


def _check_arrays(path: Path, feeds: list[Feed]) -> list[Feed]:
    for i, feed in enumerate(feeds):
        for name, arr in feed.items():
            if not isinstance(arr, np.ndarray):
                raise BadInputError(f"--inputs {path}: iteration {i} input {name!r} is a "
                                    f"{type(arr).__name__}, not an array")
            if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
                raise BadInputError(f"--inputs {path}: iteration {i} input {name!r} holds "
                                    "NaN or inf")
    return feeds


def load_polygraphy_inputs(path: str | Path) -> list[Feed]:
    """Feeds from a polygraphy inputs file (`polygraphy run --save-inputs x.json`): a JSON list
    of {name: array} dicts, one per iteration (a single dict is one iteration)."""
    from polygraphy.json import load_json

    from export_gelu.check.runners.quiet import quiet_polygraphy

    path = Path(path)
    try:
        with quiet_polygraphy():
            data = load_json(str(path), description="input data")
    except Exception as exc:  # noqa: BLE001 - JSON, base64 and polygraphy errors alike
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise BadInputError(f"--inputs {path}: not a polygraphy inputs file ({first})") from exc
    if isinstance(data, Mapping):
        data = [data]
    if not isinstance(data, list) or not data or not all(isinstance(d, Mapping) for d in data):
        raise BadInputError(f"--inputs {path}: expected a JSON list of {{name: array}} feeds "
                            "as `polygraphy run --save-inputs` writes")
    return _check_arrays(path, [OrderedDict(d) for d in data])


def check_json_path(path: str | Path, flag: str) -> Path:
    """A single-file JSON path: polygraphy treats a path without a suffix as a directory."""
    path = Path(path)
    if path.suffix.lower() != ".json":
        raise BadInputError(f"{flag} {path}: give a file name ending in .json (polygraphy reads "
                            "a path without an extension as a directory)")
    return path


def _save_atomic(write: Callable[[str], object], out: Path) -> None:
    with written_file(out) as staged:
        write(str(staged))


def save_polygraphy_inputs(feeds: Sequence[Mapping[str, np.ndarray]], out: str | Path) -> Path:
    """Write feeds as polygraphy's `--save-inputs` JSON (a list of feed dicts)."""
    from polygraphy.json import save_json

    from export_gelu.check.runners.quiet import quiet_polygraphy

    out = Path(out)
    with quiet_polygraphy():
        _save_atomic(lambda p: save_json([OrderedDict(f) for f in feeds], p,
                                         description="input data"), out)
    return out


def save_polygraphy_outputs(run_results: RunResults, out: str | Path) -> Path:
    """Write polygraphy RunResults (every runner's outputs) as `--save-outputs` JSON."""
    from export_gelu.check.runners.quiet import quiet_polygraphy

    out = Path(out)
    with quiet_polygraphy():
        _save_atomic(lambda p: run_results.save(p), out)
    return out
