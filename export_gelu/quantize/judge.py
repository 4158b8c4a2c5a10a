"""The verdict on a quantized graph: against what quantization at its scales can do.

An fp32 tolerance says nothing about an INT8 graph: every output is off by the quantization
error itself. So, like fp16 against PyTorch's own fp16 (docs/verify.md), the graph is judged
against PyTorch running the same quantization (`reference.py`: the same scales, on the same
feeds), and each output passes when

    RMS(graph − reference) ≤ JUDGE_FACTOR × RMS(reference − fp32)      (quantization's)
                           + RMS(unquantized graph − fp32)             (the form's)
                           + JUDGE_FLOOR × RMS(fp32)

that is, the graph strays from the quantized model no farther than quantization strays from
fp32 (kernels, accumulation order and rounding ties near a step make up the rest), plus
what the graph's own GELU form changes of the math: the reference computes the model's own
GELU, so a form that approximates it (sigmoid: up to 2e-2 per value) differs from it by the
form's error before any quantization. That share is measured, not assumed: the same graph
without its Q/DQ (the fp32 graph of that form) against PyTorch in float32 on the same feeds.
It is ~1e-7 for an exact form; the triangle inequality makes the sum the bound a graph that
quantizes as the reference does meets. The floor keeps an output that quantization barely
touches from being judged on noise. A wrong scale (one weight's DequantizeLinear scale ×4)
puts the graph far outside the bound.
Beside the verdict, for the user: SQNR, cosine and top-1 of the graph and of the reference
against fp32 (`metrics.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from export_gelu.quantize.metrics import OutputQuality, quality, rms

#: The bound's factor on PyTorch's own quantization error, and its floor (relative to the
#: output's RMS): measured margins in docs/quantization.md ("Reading the verdict").
JUDGE_FACTOR = 1.0
JUDGE_FLOOR = 1e-4

Runs = Sequence[Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class OutputVerdict:
    """One output: the graph and the reference against fp32, and the graph's error against
    the reference with the bound it had to meet."""

    name: str
    graph: OutputQuality  # the graph against fp32
    reference: OutputQuality  # PyTorch's fake-quant reference against fp32
    error: float  # RMS(graph − reference)
    bound: float
    passed: bool
    form_error: float = 0.0  # RMS(unquantized graph − fp32): the form's share of the bound

    @property
    def quantization_error(self) -> float:
        """RMS(reference − fp32): quantization's share of the bound."""
        return self.reference.rms_error

    def line(self) -> str:
        verdict = "ok  " if self.passed else "FAIL"
        top1 = f", top-1 {self.graph.top1:.3f}" if self.graph.top1 is not None else ""
        return (f"{verdict} {self.name}: SQNR {self.graph.sqnr_db:.1f} dB (PyTorch at the same "
                f"scales {self.reference.sqnr_db:.1f} dB), cosine {self.graph.cosine:.5f}{top1}; "
                f"RMS vs reference {self.error:.3g} ≤ {self.bound:.3g} ({self.split()})"
                + ("" if self.passed else " missed"))

    def parts(self) -> tuple[float, float]:
        """What the bound is made of (less the floor): quantization's error, the form's own."""
        return JUDGE_FACTOR * self.quantization_error, self.form_error

    def split(self) -> str:
        """The bound's parts in words."""
        quant, form = self.parts()
        return f"quantization {quant:.3g} + the form's own {form:.3g}"

    def to_json(self) -> dict[str, object]:
        return {"graph": self.graph.to_json(), "reference": self.reference.to_json(),
                "rms_vs_reference": self.error, "bound": self.bound, "passed": self.passed,
                "form_error": self.form_error}


@dataclass(frozen=True)
class QuantVerdict:
    """Every output's verdict; the graph passes when all do."""

    outputs: dict[str, OutputVerdict]
    notes: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.outputs.values())

    @property
    def failed(self) -> list[str]:
        return [name for name, v in self.outputs.items() if not v.passed]

    def to_json(self) -> dict[str, object]:
        return {"passed": self.passed, "rule": RULE,
                "outputs": {k: v.to_json() for k, v in self.outputs.items()},
                "notes": list(self.notes)}


RULE = (f"RMS(graph - reference) <= {JUDGE_FACTOR:g} x RMS(reference - fp32) + "
        f"RMS(unquantized graph - fp32) + {JUDGE_FLOOR:g} x RMS(fp32)")


def _rms_between(a: Runs, b: Runs, name: str) -> float:
    return rms(np.concatenate([(np.asarray(x[name], np.float64) - np.asarray(y[name],
                                                                             np.float64)).ravel()
                               for x, y in zip(a, b)]))


def judge(fp32: Runs, graph: Runs, reference: Runs, logits: Sequence[str] = (),
          notes: Sequence[str] = (), unquantized: Runs | None = None) -> QuantVerdict:
    """The verdict on `graph`'s outputs (one dict per feed) given fp32's and the fake-quant
    reference's on the same feeds; `logits` names outputs whose top-1 agreement counts;
    `unquantized`: the same graph's outputs without its Q/DQ (its GELU form's own error
    against fp32 is added to the bound; None: nothing is added, and a note says so)."""
    graph_q = quality(fp32, graph, logits)
    ref_q = quality(fp32, reference, logits)
    outputs: dict[str, OutputVerdict] = {}
    for name, g in graph_q.items():
        if name not in ref_q:
            continue
        scale = rms(np.concatenate([np.asarray(r[name], np.float64).ravel() for r in fp32]))
        error = _rms_between(graph, reference, name)
        form = (_rms_between(unquantized, fp32, name)
                if unquantized is not None and all(name in u for u in unquantized) else 0.0)
        bound = JUDGE_FACTOR * ref_q[name].rms_error + form + JUDGE_FLOOR * scale
        outputs[name] = OutputVerdict(name, g, ref_q[name], error, bound, error <= bound, form)
    return QuantVerdict(outputs, tuple(notes))
