"""Activation ranges from ONNX Runtime's calibrators, for exactly the tensors a plan chose.

`onnxruntime.quantization`'s MinMax, Entropy and Percentile calibrators run the fp32 graph
(augmented with its own reduction or histogram outputs) on every feed; each is asked for
the plan's activation tensors only (its tensor selection is overridden), so nothing else is
measured and no GELU value is ever looked at. Defaults (docs/quantization.md, "Calibration":
the three differ by at most 0.3 dB on the bundled BERT, GPT-2 and ViT): INT8 `percentile`
(99.999th percentile of |x|: a few outliers do not stretch the scale of the other 255
levels), FP8 `minmax` (E4M3's exponent keeps relative precision over the whole range, so
clipping outliers buys nothing and costs their values).
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from export_gelu.errors import BadInputError

if TYPE_CHECKING:
    from onnxruntime.quantization.calibrate import CalibraterBase

METHODS = ("minmax", "entropy", "percentile")
DEFAULT_METHOD = {"int8": "percentile", "fp8": "minmax"}

#: Graphs above this size are written with external data for the calibrator (protobuf's
#: 2 GB limit, with margin for the calibrator's own outputs).
_EXTERNAL_BYTES = 1 << 30


@dataclass(frozen=True)
class TensorRange:
    """The range a calibrator chose for one tensor."""

    lowest: float
    highest: float

    @property
    def amax(self) -> float:
        """The largest magnitude: what a symmetric scale maps to the format's largest value."""
        return max(abs(self.lowest), abs(self.highest))


def method_for(precision: str, method: str | None) -> str:
    """`method`, or the precision's default; ValueError for an unknown name."""
    chosen = method or DEFAULT_METHOD[precision]
    if chosen not in METHODS:
        raise ValueError(f"unknown calibrator {chosen!r}; choose one of {', '.join(METHODS)}")
    return chosen


class _Reader:
    """The feeds as ONNX Runtime's CalibrationDataReader (get_next until None)."""

    def __init__(self, feeds: Sequence[Mapping[str, np.ndarray]]) -> None:
        self._feeds: Iterator[Mapping[str, np.ndarray]] = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        feed = next(self._feeds, None)
        return dict(feed) if feed else None


def _calibrator(method: str, path: Path, augmented: Path, tensors: Sequence[str],
                external: bool) -> CalibraterBase:
    from onnxruntime.quantization import calibrate as C

    base = {"minmax": C.MinMaxCalibrater, "entropy": C.EntropyCalibrater,
            "percentile": C.PercentileCalibrater}[method]
    wanted = set(tensors)

    class Chosen(base):  # type: ignore[misc, valid-type]  # ORT ships no type information
        def select_tensors_to_calibrate(self, model: onnx.ModelProto
                                        ) -> tuple[set[str], dict[str, onnx.ValueInfoProto]]:
            found, value_infos = super().select_tensors_to_calibrate(model)
            return {t for t in wanted if t in value_infos}, value_infos

    kwargs: dict[str, object] = {"augmented_model_path": str(augmented),
                                 "use_external_data_format": external}
    if method == "minmax":
        kwargs["symmetric"] = True
    elif method == "percentile":
        kwargs.update(symmetric=True, num_bins=2048, percentile=99.999)
    else:
        kwargs.update(symmetric=True, num_bins=128, num_quantized_bins=128)
    return Chosen(str(path), **kwargs)


def calibrate(model: onnx.ModelProto, tensors: Sequence[str],
              feeds: Sequence[Mapping[str, np.ndarray]], method: str
              ) -> dict[str, TensorRange]:
    """The range of each of `tensors` over `feeds` (each keyed by the graph's input names),
    measured on the fp32 `model` by ONNX Runtime's `method` calibrator."""
    if method not in METHODS:
        raise ValueError(f"unknown calibrator {method!r}; choose one of {', '.join(METHODS)}")
    if not tensors:
        return {}
    if not feeds:
        raise BadInputError("calibration needs at least one feed")
    from export_gelu.passes.onnx.plugin_math import plugins_as_math

    work = onnx.ModelProto()
    work.CopyFrom(model)
    plugins_as_math(work)  # the TensorRT GELU plugin, which ONNX Runtime lacks, as its math
    external = work.ByteSize() > _EXTERNAL_BYTES
    with tempfile.TemporaryDirectory(prefix="export-gelu-calibrate-") as tmp:
        path, augmented = Path(tmp) / "model.onnx", Path(tmp) / "augmented.onnx"
        onnx.save(work, str(path), save_as_external_data=external)
        calibrator = _calibrator(method, path, augmented, tensors, external)
        with contextlib.redirect_stdout(io.StringIO()):  # the histogram ones print progress
            calibrator.augment_graph()
            calibrator.create_inference_session()
            calibrator.collect_data(_Reader(feeds))
            data = calibrator.compute_data()
    missing = [t for t in tensors if t not in data]
    if missing:
        raise BadInputError(f"the calibrator could not measure {len(missing)} tensor(s) "
                            f"(no inferred float type): {', '.join(missing[:5])}")
    ranges: dict[str, TensorRange] = {}
    for name in tensors:
        low, high = (np.asarray(v, dtype=np.float64) for v in data[name].range_value)
        ranges[name] = TensorRange(float(low.min()), float(high.max()))
    return ranges
