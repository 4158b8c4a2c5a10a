"""Is a graph at a reduced precision usable? One rule for any precision below fp32 (fp16 and
bf16 now; INT8 and FP8 take the same three numbers): the reference model's own error at that
precision, the graph's error, and the output's scale (max |reference|), all on the same inputs
against the full-precision reference.

A graph over the fixed tolerance may still be as good as the model can be at that precision
(it rounds differently from PyTorch, not worse): it passes within `precision_bound` of the
reference's own error. That bound says nothing when the reference's own error is itself a
large share of what the output spans (T5 overflowing in fp16: PyTorch off by the whole
scale, so "twice PyTorch's error" lets anything pass). So the graph must also stay within
`SCALE_SHARE` of the output's scale, and a reference error beyond that share names the
precision unsafe for this model, whatever the graph does (docs/verify.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from export_gelu.tolerances import precision_bound

#: A reduced-precision output is usable when its max abs error is at most this share of the
#: output's scale (max |reference|), or the fixed atol where that is larger; a reference whose
#: own error at that precision exceeds it makes the precision unsafe for the model.
SCALE_SHARE = 0.05


@dataclass(frozen=True)
class ReducedVerdict:
    """The rule's answer for one output."""

    passed: bool  # within the reference's own error and within the output's scale
    unsafe: bool  # the reference itself errs beyond SCALE_SHARE of the scale (or not finite)
    bound: float  # the max abs error the graph may have
    graph_share: float  # graph error / scale
    reference_share: float  # reference error / scale


def _share(error: float, scale: float) -> float:
    if scale > 0:
        return error / scale
    return 0.0 if error == 0 else math.inf


def judge_reduced(reference_error: float, graph_error: float, scale: float, atol: float
                  ) -> ReducedVerdict:
    """The verdict on one output of a graph at a reduced precision whose max abs error is
    `graph_error`, where the reference model run at that precision errs by `reference_error`
    and the output spans `scale` (all against the full-precision reference); `atol` is the
    precision's fixed tolerance (a floor for both bounds)."""
    scale_bound = max(SCALE_SHARE * scale, atol)
    finite = math.isfinite(reference_error)
    reference_bound = precision_bound(reference_error, atol) if finite else math.inf
    bound = min(reference_bound, scale_bound)
    return ReducedVerdict(
        passed=math.isfinite(graph_error) and graph_error <= bound,
        unsafe=not finite or reference_error > scale_bound,
        bound=bound,
        graph_share=_share(graph_error, scale),
        reference_share=_share(reference_error, scale) if finite else math.inf)
