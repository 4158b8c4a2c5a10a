"""Quantized deployment, INT8 and FP8: what to quantize, its calibration, the graph for each
target, and the pieces of the verdict (docs/quantization.md).

    placement.py   WHAT is quantized: the weight products' inputs, never a GELU's tensors
    routes.py      how a target takes it: explicit Q/DQ, or a TensorRT calibration cache
    calibrate.py   activation ranges from ONNX Runtime's calibrators
    lower.py       the Q/DQ graph (onnx-graphsurgeon), or the cache (cache.py)
    read_qdq.py    a Q/DQ graph's own scales, read back
    reference.py   PyTorch at those scales (fake-quant; the only module importing torch)
    metrics.py     SQNR, cosine, top-1;   judge.py   the verdict against the reference
    sensitivity.py per-module error, and the fewest modules to keep for a target SQNR
    flags.py       the trtexec flags each TensorRT version takes for them

Plain functions over typed records, in order:

    plan = plan_quantization(model, precision, keep)
    route = route_for(profile, precision)
    ranges = calibrate(model, plan.activations, feeds, method_for(precision, method))
    quantized = lower(model, plan, ranges, route)
    verdict = judge(fp32_runs, graph_runs, reference_runs, logits)
"""

from export_gelu.quantize.cache import calibration_cache_text, read_calibration_cache
from export_gelu.quantize.calibrate import (
    DEFAULT_METHOD,
    METHODS,
    TensorRange,
    calibrate,
    method_for,
)
from export_gelu.quantize.flags import DeviceBuild, trtexec_precision_flags
from export_gelu.quantize.formats import PRECISIONS
from export_gelu.quantize.judge import QuantVerdict, judge
from export_gelu.quantize.lower import Quantized, lower
from export_gelu.quantize.metrics import OutputQuality, quality
from export_gelu.quantize.placement import QuantPlan, QuantPoint, plan_quantization
from export_gelu.quantize.read_qdq import QdqProduct, is_qdq_graph, read_qdq
from export_gelu.quantize.routes import CALIBRATION_CACHE, QDQ, QuantRoute, route_for
from export_gelu.quantize.runs import run_graph
from export_gelu.quantize.sensitivity import (
    DEFAULT_TARGET_SQNR_DB,
    MixedPrecision,
    ModuleSensitivity,
    auto_keep,
    sensitivity,
)

__all__ = [
    "CALIBRATION_CACHE", "DEFAULT_METHOD", "DEFAULT_TARGET_SQNR_DB", "METHODS", "PRECISIONS",
    "QDQ", "DeviceBuild", "MixedPrecision", "ModuleSensitivity", "OutputQuality", "QdqProduct",
    "QuantPlan", "QuantPoint", "QuantRoute", "QuantVerdict", "Quantized", "TensorRange",
    "auto_keep", "calibrate", "calibration_cache_text", "is_qdq_graph", "judge", "lower",
    "method_for", "plan_quantization", "quality", "read_calibration_cache", "read_qdq",
    "route_for", "run_graph", "sensitivity", "trtexec_precision_flags",
]
