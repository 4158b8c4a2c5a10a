"""Numerical parity of a deployed graph against the original model, through polygraphy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.check.runners.quiet import quiet_polygraphy
from export_gelu.json_value import JsonObject
from export_gelu.passes.compat.precision.fp16_islands import Island
from export_gelu.tolerances import (
    JUDGED_ATOL,
    JUDGED_CONSTANT,
    JUDGED_OWN_SCALE,
    JUDGED_ZERO,
    Judging,
    judging_for,
)

#: At most this many absolute errors per output are kept for histograms (an even subsample).
MAX_ERROR_SAMPLES = 200_000

if TYPE_CHECKING:
    from polygraphy.backend.base import BaseRunner
    from polygraphy.comparator import RunResults


@dataclass
class OutputError:
    """Error statistics of one output, deployed vs reference (over every iteration)."""

    max_abs: float
    max_rel: float
    mean_abs: float
    p999_abs: float
    ref_scale: float  # max |reference|, to read max_abs against
    passed: bool
    nonfinite: int = 0
    elements: int = 0
    #: the rule that judged it (tolerances.judging_for) and the atol it used
    judged: str = JUDGED_ATOL
    judged_atol: float | None = None
    #: PyTorch's own max abs error at the graph's precision (fp16/bf16 runs), else None
    pytorch_max_abs: float | None = None


@dataclass
class ParityResult:
    status: str  # passed | failed | skipped
    reason: str = ""
    atol: float = 0.0
    rtol: float = 0.0
    runners: list[str] = field(default_factory=list)
    outputs: dict[str, OutputError] = field(default_factory=dict)
    iterations: int = 0
    #: |deployed − reference| per output (subsampled), for plots; not part of the JSON.
    error_samples: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: polygraphy RunResults of both runners, for `--save-outputs`; not part of the JSON.
    run_results: RunResults | None = field(default=None, repr=False)
    # -- verdicts that mean something (docs/verify.md "Reading a verdict") --
    #: the reference differs from itself on the same inputs (check/verdict/nondeterminism.py)
    nondeterministic: JsonObject | None = None
    #: PyTorch's own error at the graph's precision, and the rule it set
    #: (check/verdict/half_baseline.py)
    pytorch_precision: JsonObject | None = None
    #: fp32 islands kept in an fp16 graph to fix an overflow
    #: (passes/compat/precision/fp16_islands.py)
    islands: list[Island] | None = None

    def to_json(self) -> JsonObject:
        return {
            "status": self.status,
            "reason": self.reason,
            "atol": self.atol,
            "rtol": self.rtol,
            "runners": list(self.runners),
            "iterations": self.iterations,
            "outputs": {n: asdict(o) for n, o in self.outputs.items()},
            **self._verdicts_json(),
        }

    def _verdicts_json(self) -> JsonObject:
        """The keys of honest verdicts: nondeterminism, PyTorch's own low-precision error,
        fp32 islands (each null when it does not apply)."""
        return {"nondeterministic": self.nondeterministic,
                "pytorch_precision": self.pytorch_precision,
                "islands": (None if self.islands is None
                            else [i.to_json() for i in self.islands])}


def skipped(reason: str) -> ParityResult:
    return ParityResult("skipped", reason)


def _shape_mismatch(ref: np.ndarray) -> OutputError:
    inf = float("inf")
    return OutputError(inf, inf, inf, inf, float(np.max(np.abs(ref))) if ref.size else 0.0,
                       False, 0, int(ref.size))


def errors_of(refs: Sequence[np.ndarray], outs: Sequence[np.ndarray], atol: float, rtol: float,
              *, inputs_differ: bool = False) -> tuple[OutputError, np.ndarray]:
    """Statistics of one output over iterations (float64), and its absolute errors.

    An element fails only if both abs > atol and rel > rtol (polygraphy's rule), or is not
    finite; rel is relative to the reference. A reference that cannot tell a right graph from
    a wrong one (near zero, all zero, or the same for the different inputs of
    `inputs_differ` feeds) is judged by `judging_for`.
    """
    r_all = [np.asarray(r, dtype=np.float64) for r in refs]
    o_all = [np.asarray(o, dtype=np.float64) for o in outs]
    if any(r.shape != o.shape for r, o in zip(r_all, o_all)):
        return _shape_mismatch(np.concatenate([r.ravel() for r in r_all])), np.empty(0)
    r = np.concatenate([a.ravel() for a in r_all]) if r_all else np.empty(0)
    o = np.concatenate([a.ravel() for a in o_all]) if o_all else np.empty(0)
    if r.size == 0:
        return OutputError(0.0, 0.0, 0.0, 0.0, 0.0, True), np.empty(0)
    with np.errstate(over="ignore", invalid="ignore"):  # inf/nan outputs are counted below
        diff = np.abs(r - o)
        rel = diff / np.maximum(np.abs(r), np.finfo(np.float64).tiny)
    nonfinite = int(np.count_nonzero(~np.isfinite(o)))
    scale = float(np.abs(r).max())
    is_float = np.asarray(refs[0]).dtype.kind == "f"
    constant = (inputs_differ and len(r_all) > 1
                and all(np.array_equal(a, r_all[0]) for a in r_all[1:]))
    judging = (judging_for(atol, rtol, scale, constant=constant) if is_float
               else Judging(atol, JUDGED_ATOL))
    bad = ((diff > judging.atol) & (rel > rtol)) | ~np.isfinite(diff)
    finite = diff[np.isfinite(diff)]
    stats = OutputError(
        max_abs=float(diff.max()),
        max_rel=float(rel.max()),
        mean_abs=float(diff.mean()),
        p999_abs=float(np.quantile(diff, 0.999)),
        ref_scale=scale,
        passed=judging.judgeable and not bool(bad.any()),
        nonfinite=nonfinite,
        elements=int(r.size),
        judged=judging.rule,
        judged_atol=judging.atol,
    )
    step = max(1, finite.size // MAX_ERROR_SAMPLES)
    return stats, finite[::step].astype(np.float32)


def compare_all(reference: BaseRunner, deployed: Sequence[BaseRunner],
                feeds: Sequence[Mapping[str, np.ndarray]], atol: float, rtol: float
                ) -> list[ParityResult]:
    """Run the reference once and every deployed runner on the same feeds (one iteration each,
    as polygraphy saves them) through polygraphy's Comparator; one result per deployed runner,
    its statistics over all iterations together."""
    from polygraphy.comparator import Comparator, RunResults, SimpleCompareFunc

    with quiet_polygraphy(silent=True):  # the verdict is ours, per output, once
        results = Comparator.run([reference, *deployed], data_loader=list(feeds))
        # determinism: a second run of the reference (a recorded one ran twice when live)
        again = getattr(reference, "again", None)
        if again is None:
            again = Comparator.run([reference], data_loader=list(feeds[:1]))[0][1][0]
        differ = _inputs_differ(feeds)
        out = []
        for i in range(1, len(results)):
            pair = RunResults([results[0], results[i]])
            # (deployed, reference): polygraphy's rtol is relative to the second of the pair.
            verdict = Comparator.compare_accuracy(
                pair, comparisons=[(1, 0)],
                compare_func=SimpleCompareFunc(atol=atol, rtol=rtol, check_shapes=True))
            out.append(_result_of(pair, bool(verdict), atol, rtol, len(feeds), differ))
    _judge_determinism(out, reference, results[0][1][0], again, feeds[0], atol=atol, rtol=rtol)
    return out


def _inputs_differ(feeds: Sequence[Mapping[str, np.ndarray]]) -> bool:
    """Two of the feeds hold different values (so a reference the same on both says
    nothing about its inputs)."""
    first = feeds[0] if feeds else {}
    return any(any(not np.array_equal(np.asarray(f[k]), np.asarray(first[k]))
                   for k in f if k in first) for f in feeds[1:])


def _judge_determinism(results: list[ParityResult], reference: BaseRunner,
                       first: Mapping[str, np.ndarray], second: Mapping[str, np.ndarray],
                       feed: Mapping[str, np.ndarray], *, atol: float, rtol: float) -> None:
    """A reference that differs from itself on the same inputs fails every result, naming
    the random op and the way out (check/verdict/nondeterminism.py)."""
    from export_gelu.check.verdict.nondeterminism import (
        nondeterminism_verdict,
        random_sites,
        self_difference,
    )

    differs = self_difference(dict(first), dict(second), atol, rtol)
    if differs is None:
        return
    sites = getattr(reference, "random_sites", None)
    if sites is None:
        with quiet_polygraphy(silent=True):
            sites = random_sites(reference, feed)
    reason, block = nondeterminism_verdict(reference.name, *differs, sites)
    for result in results:
        result.status, result.reason, result.nondeterministic = "failed", reason, block


def _result_of(pair: RunResults, verdict: bool, atol: float, rtol: float, n_feeds: int,
               inputs_differ: bool = False) -> ParityResult:
    (ref_name, ref_iters), (dep_name, dep_iters) = pair[0], pair[1]
    outputs: dict[str, OutputError] = {}
    samples: dict[str, np.ndarray] = {}
    for name in dep_iters[0].keys():
        if name not in ref_iters[0].keys():
            continue
        outputs[name], samples[name] = errors_of([it[name] for it in ref_iters],
                                                 [it[name] for it in dep_iters], atol, rtol,
                                                 inputs_differ=inputs_differ)
    passed = verdict and all(o.passed for o in outputs.values()) and bool(outputs)
    failed = [n for n, o in outputs.items() if not o.passed]
    if passed:
        reason = ""
    elif failed:
        reason = failure_reason(outputs, failed)
    elif not outputs:
        ref_keys, dep_keys = ", ".join(ref_iters[0].keys()), ", ".join(dep_iters[0].keys())
        reason = (f"no outputs could be paired between the runners ({ref_name}: {ref_keys}; "
                  f"{dep_name}: {dep_keys})")
    else:
        reason = "polygraphy's comparison failed (shapes or missing outputs)"
    return ParityResult("passed" if passed else "failed", reason, atol, rtol,
                        [ref_name, dep_name], outputs, n_feeds, samples, pair)


def unjudged(out: OutputError) -> bool:
    """The output's reference says nothing (0 in every element, or the same for different
    inputs): its verdict cannot be PASSED, whatever the graph gives."""
    return out.judged in (JUDGED_ZERO, JUDGED_CONSTANT)


def over_tolerance(out: OutputError, atol: float) -> bool:
    """The graph's output differs from the reference beyond tolerance: a divergence. An
    output failed only because its reference says nothing (`unjudged`) has diverged only where
    the graph is off by more than `atol` (or not finite): matching a zero is no divergence."""
    if out.passed:
        return False
    if unjudged(out):
        return out.nonfinite > 0 or not out.max_abs <= atol
    return True


def diverged(result: ParityResult | None) -> bool:
    """Something in the graph's outputs differs from the reference: a failure that a first
    divergence can place. Not so when the reference differs from itself (nondeterministic: no
    graph can match it), nor when every failed output was only not judged and matches."""
    if result is None or result.status != "failed" or result.nondeterministic is not None:
        return False
    if not result.outputs:  # nothing paired: the graph's own tensors may still tell
        return True
    return any(over_tolerance(o, result.atol) for o in result.outputs.values())


def failure_reason(outputs: Mapping[str, OutputError], failed: Sequence[str]) -> str:
    """Why these outputs failed: over tolerance, or a reference that says nothing."""
    silent = [n for n in failed if unjudged(outputs[n])]
    over = [n for n in failed if n not in silent]
    parts = []
    if over:
        parts.append("outputs over tolerance: " + ", ".join(
            f"{n} (max abs {outputs[n].max_abs:.3g}, max rel {outputs[n].max_rel:.3g}"
            + (f", judged at the reference's own scale: atol {outputs[n].judged_atol:.3g}"
               if outputs[n].judged == JUDGED_OWN_SCALE else "") + ")"
            for n in over))
    for n in silent:
        what = ("is 0 in every element" if outputs[n].judged == JUDGED_ZERO
                else "is the same for different inputs")
        parts.append(f"not judged: the reference of {n} {what}, so any graph giving that "
                     "would match it; feed inputs (or weights) on which it varies")
    return "; ".join(parts)
