"""A folder's `preprocessor_config.json`, checked like the rest of its files before any size is
taken from it (exporter/hf/inputs.py): the image sizes (`crop_size`, `size` and their
`height`, `width`, `shortest_edge`, `longest_edge`) positive integers of at most MAX_SIDE, the
`sampling_rate` a finite positive number of at most MAX_RATE, the `feature_size` a positive
integer of at most MAX_FEATURES; anything else is exit 2 naming the file and the key (a crop
of -8, 10⁹ × 10⁹ or a rate of Infinity made a run fail with an internal error).
"""

from __future__ import annotations

import math
from pathlib import Path

from export_gelu.errors import BadInputError
from export_gelu.shown import shown

#: Larger than any image processor's size (SAM: 1024), small enough to make an input of.
MAX_SIDE = 8192
#: Hz: past any audio processor's rate (16 kHz, 48 kHz; studio audio 192 kHz).
MAX_RATE = 768_000
MAX_FEATURES = 4096
_SIDES = ("height", "width", "shortest_edge", "longest_edge")


def _int(value: object, where: str, largest: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= largest:
        raise BadInputError(f"{where} is {shown(repr(value), 40)}; a size there is a whole "
                            f"number from 1 to {largest}")


def check_processor(data: dict[str, object], path: Path) -> dict[str, object]:
    """`data` (the parsed file at `path`) when every size it gives is one a model can take."""
    for key in ("crop_size", "size"):
        value = data.get(key)
        if isinstance(value, dict):
            for side in _SIDES:
                if value.get(side) is not None:
                    _int(value[side], f"{path}: {key}.{side}", MAX_SIDE)
        elif value is not None:
            _int(value, f"{path}: {key}", MAX_SIDE)
    rate = data.get("sampling_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                             or not math.isfinite(rate) or not 0 < rate <= MAX_RATE):
        raise BadInputError(f"{path}: sampling_rate is {shown(repr(rate), 40)}; a sampling rate "
                            f"is a finite number of Hz above 0 and at most {MAX_RATE}")
    if data.get("feature_size") is not None:
        _int(data["feature_size"], f"{path}: feature_size", MAX_FEATURES)
    return data
