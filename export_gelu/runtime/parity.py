"""Numerical parity of a deployed graph against the original model, through polygraphy."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

#: Default tolerances by precision (polygraphy semantics: fail only if abs > atol AND rel > rtol).
DEFAULT_TOLERANCES = {"fp32": (1e-4, 1e-3), "fp16": (2e-2, 2e-2), "bf16": (1e-1, 5e-2)}

#: How many times a form's worst-case pointwise error a whole model may amplify it, by default.
FORM_ERROR_HEADROOM = 20.0


@dataclass
class OutputError:
    """Error statistics of one output, deployed vs reference."""

    max_abs: float
    max_rel: float
    mean_abs: float
    p999_abs: float
    ref_scale: float  # max |reference|, to read max_abs against
    passed: bool
    nonfinite: int = 0


@dataclass
class ParityResult:
    status: str  # passed | failed | skipped
    reason: str = ""
    atol: float = 0.0
    rtol: float = 0.0
    runners: list[str] = field(default_factory=list)
    outputs: dict[str, OutputError] = field(default_factory=dict)

    @property
    def failed_outputs(self) -> list[str]:
        return [n for n, o in self.outputs.items() if not o.passed]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["outputs"] = {n: asdict(o) for n, o in self.outputs.items()}
        return data


def skipped(reason: str) -> ParityResult:
    return ParityResult("skipped", reason)


def default_tolerances(precision: str, added_form_error: float = 0.0) -> tuple[float, float]:
    """(atol, rtol) for a precision, widened when a GELU form change adds known error."""
    atol, rtol = DEFAULT_TOLERANCES.get(precision, DEFAULT_TOLERANCES["fp32"])
    return max(atol, added_form_error * FORM_ERROR_HEADROOM), rtol


def output_error(ref: np.ndarray, out: np.ndarray, atol: float, rtol: float) -> OutputError:
    """Statistics in float64; an element fails only if both abs > atol and rel > rtol."""
    r = np.asarray(ref, dtype=np.float64)
    o = np.asarray(out, dtype=np.float64)
    if r.shape != o.shape:
        return OutputError(float("inf"), float("inf"), float("inf"), float("inf"),
                           float(np.max(np.abs(r))) if r.size else 0.0, False)
    diff = np.abs(r - o)
    nonfinite = int(np.count_nonzero(~np.isfinite(o)))
    rel = diff / np.maximum(np.abs(r), np.finfo(np.float64).tiny)
    bad = (diff > atol) & (rel > rtol) | ~np.isfinite(diff)
    return OutputError(
        max_abs=float(diff.max()) if diff.size else 0.0,
        max_rel=float(rel.max()) if rel.size else 0.0,
        mean_abs=float(diff.mean()) if diff.size else 0.0,
        p999_abs=float(np.quantile(diff, 0.999)) if diff.size else 0.0,
        ref_scale=float(np.abs(r).max()) if r.size else 0.0,
        passed=not bool(bad.any()),
        nonfinite=nonfinite,
    )


def compare_runners(reference: Any, deployed: Any, feed: dict[str, np.ndarray],
                    atol: float, rtol: float) -> ParityResult:
    """Run both polygraphy runners through Comparator on the same feed and compare outputs."""
    from polygraphy.comparator import Comparator, SimpleCompareFunc

    from export_gelu.runtime.quiet import quiet_polygraphy

    with quiet_polygraphy():
        results = Comparator.run([reference, deployed], data_loader=[feed])
        verdict = Comparator.compare_accuracy(
            results, compare_func=SimpleCompareFunc(atol=atol, rtol=rtol, check_shapes=True))
    (ref_name, ref_iters), (dep_name, dep_iters) = results[0], results[1]
    ref_out, dep_out = ref_iters[0], dep_iters[0]
    outputs = {}
    for name in dep_out.keys():
        if name not in ref_out.keys():
            continue
        outputs[name] = output_error(ref_out[name], dep_out[name], atol, rtol)
    passed = bool(verdict) and all(o.passed for o in outputs.values()) and bool(outputs)
    failed = [n for n, o in outputs.items() if not o.passed]
    reason = "" if passed else (
        "outputs over tolerance: " + ", ".join(
            f"{n} (max abs {outputs[n].max_abs:.3g})" for n in failed)
        if failed else "no outputs could be paired between the runners")
    return ParityResult("passed" if passed else "failed", reason, atol, rtol,
                        [ref_name, dep_name], outputs)
