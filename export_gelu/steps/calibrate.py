"""Where each GELU site's inputs lie (check/calibration.py: the model run with fx), on the feeds
a command ran: the user's real data (`--inputs`), or made-up inputs said to be so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from export_gelu.check.calibration import Calibration, gelu_input_ranges
from export_gelu.check.inputs.input_resolver import ranges_label
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.run import Run


def calibrate(loaded: LoadedModel, feeds: Sequence[Mapping[str, np.ndarray]], label: str,
              real: bool, run: Run | None = None) -> Calibration:
    """The GELU input ranges of `loaded` on `feeds` (from `label`; `real`: the user's data)."""
    if run is not None:
        run.say("recording GELU input ranges")
    return gelu_input_ranges(loaded, feeds, ranges_label(label, real))
