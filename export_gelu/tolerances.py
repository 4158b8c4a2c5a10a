"""Every tolerance the package judges numbers with, decided here: a parity check's (one
function for every command, from the precision, the error a GELU form change adds, what the
user gave, and what a bundle recorded), how a reference that says nothing is judged, the
fp16/bf16 bound from PyTorch's own error, and how far an opset conversion may move outputs.

Polygraphy's rule applies: an element fails only if abs > atol AND rel > rtol.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Default (atol, rtol) by precision; "fp64": a float64 model checked in float64.
DEFAULT_TOLERANCES = {"fp32": (1e-4, 1e-3), "fp16": (2e-2, 2e-2), "bf16": (1e-1, 5e-2),
                      "fp64": (1e-10, 1e-9)}
#: The precisions a verdict knows (a bundle's manifest names one of them); an int8/fp8 graph
#: is judged by the INT8/FP8 verdict (quantize/judge.py), anything else of it at fp32's.
JUDGED_PRECISIONS = (*DEFAULT_TOLERANCES, "int8", "fp8")
#: How many times a form's worst-case pointwise error a whole model may amplify it, by default.
FORM_ERROR_HEADROOM = 20.0


@dataclass(frozen=True)
class Tolerances:
    atol: float
    rtol: float


def resolve_tolerances(precision: str, *, added_error: float = 0.0, atol: float | None = None,
                       rtol: float | None = None, recorded: Mapping[str, Any] | None = None
                       ) -> Tolerances:
    """The tolerances to check with: `atol`/`rtol` as given (`--atol`, `--rtol`), else those a
    device bundle `recorded` when it was made, else the precision's defaults, atol widened to
    `added_error` × FORM_ERROR_HEADROOM when a GELU form change adds known error."""
    d_atol, d_rtol = DEFAULT_TOLERANCES.get(precision, DEFAULT_TOLERANCES["fp32"])
    d_atol = max(d_atol, added_error * FORM_ERROR_HEADROOM)
    recorded = recorded or {}
    return Tolerances(atol if atol is not None else float(recorded.get("atol", d_atol)),
                      rtol if rtol is not None else float(recorded.get("rtol", d_rtol)))


#: How an output was judged (OutputError.judged): the rule that decided its verdict.
JUDGED_ATOL = "atol"  # the usual rule: abs > atol and rel > rtol fails an element
JUDGED_OWN_SCALE = "reference scale"  # a near-zero reference: atol shrunk to rtol × max |ref|
JUDGED_ZERO = "zero reference"  # every reference element is 0: any all-zero graph would match
JUDGED_CONSTANT = "constant reference"  # the same reference for different inputs


@dataclass(frozen=True)
class Judging:
    """The atol an output is judged with, the rule that chose it, and whether a verdict of
    PASSED is possible at all (not for a reference that says nothing)."""

    atol: float
    rule: str
    judgeable: bool = True


def judging_for(atol: float, rtol: float, ref_scale: float, *, constant: bool = False
                ) -> Judging:
    """The one rule for references that cannot tell a right graph from a wrong one.

    - every element 0 (max |ref| == 0), or the same values for two different inputs: not
      judgeable, never PASSED (an all-zero or constant graph would match it);
    - max |ref| ≤ atol: the fixed atol would pass any graph whose outputs are near zero too
      (an all-zero one included), so the output is judged at its own scale: atol becomes
      rtol × max |ref| (the element test is then relative to the reference's magnitude);
    - otherwise the given atol.
    """
    if ref_scale == 0.0:
        return Judging(0.0, JUDGED_ZERO, judgeable=False)
    if constant:
        return Judging(atol, JUDGED_CONSTANT, judgeable=False)
    if ref_scale <= atol:
        return Judging(rtol * ref_scale, JUDGED_OWN_SCALE)
    return Judging(atol, JUDGED_ATOL)


#: fp16/bf16: a graph passes an output when its max abs error is within this multiple of
#: PyTorch's own error at that precision on the same inputs, plus a floor (docs/verify.md).
PRECISION_ERROR_MULTIPLE = 2.0
#: The floor, as a share of the precision's atol: an output PyTorch computes exactly in fp16
#: still allows the rounding of one different summation order.
PRECISION_FLOOR_SHARE = 0.1
JUDGED_PYTORCH_PRECISION = "pytorch precision"  # within a multiple of PyTorch's own error


def precision_bound(pytorch_max_abs: float, atol: float) -> float:
    """The max abs error a low-precision graph may have on an output where PyTorch's own
    model, run at that precision, errs by `pytorch_max_abs`."""
    return PRECISION_ERROR_MULTIPLE * pytorch_max_abs + PRECISION_FLOOR_SHARE * atol


#: An opset conversion (passes/compat/opset/upconvert.py) must leave every output within this share
#: of the output's scale (max |value|, at least 1): the same graph at another opset differs in
#: ONNX Runtime only by kernels' summation order. fp16 outputs round to 11 significant bits.
REWRITE_SHARE = {"float16": 2e-3, "other": 1e-5}


def rewrite_tolerance(half: bool, scale: float) -> float:
    """The max abs difference an opset conversion may make on an output of max |value|
    `scale` (`half`: an fp16 output)."""
    return REWRITE_SHARE["float16" if half else "other"] * max(1.0, scale)
