"""The one checker: a reference and the deployed runners on the same feeds, compared with one
set of tolerances, then (when asked) timed together. Every command checks through `run_check`:
export (ONNX Runtime's providers and a TensorRT engine), verify, parity at each `--dynamic`
shape, the device's recorded outputs, and the GELU forms side by side.

A runner is a polygraphy runner: `TorchRunner` (PyTorch), an `OnnxrtRunner`, a TensorRT
runner, or a `RecordedRunner` that replays outputs computed earlier (a big model's reference,
or what a device wrote back).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.check.latency import Latency, measure_latency
from export_gelu.check.reference.recorded import RecordedRunner
from export_gelu.check.runners.run_failure import deployed_run_failure
from export_gelu.check.verdict.half_baseline import judge_against_pytorch
from export_gelu.check.verdict.parity import ParityResult, compare_all
from export_gelu.errors import out_of_memory
from export_gelu.progress import Progress
from export_gelu.tolerances import Tolerances

if TYPE_CHECKING:
    from polygraphy.backend.base import BaseRunner

Feed = Mapping[str, np.ndarray]


@dataclass
class CheckJob:
    """What to check: `runners` against `reference` on `feeds` (as the deployed graphs take
    them), within `tolerances`; then `iterations` timed runs of all of them on the first feed
    (0: parity only). The first runner's verdict is the check's, unless another one fails."""

    reference: BaseRunner
    runners: Sequence[BaseRunner]
    feeds: Sequence[Feed]
    tolerances: Tolerances
    iterations: int = 0
    warmup: int = 0
    feeds_by_runner: Mapping[str, Feed] | None = None  # for timing a runner on its own feed
    #: fp16/bf16: each output is also judged against PyTorch's own error at that precision
    precision: str = "fp32"


@dataclass
class CheckOutcome:
    verdict: ParityResult
    by_runner: dict[str, ParityResult] = field(default_factory=dict)
    latency: dict[str, Latency] = field(default_factory=dict)


def run_check(job: CheckJob, progress: Progress | None = None) -> CheckOutcome:
    """Parity of every runner against the reference, the verdict, and latency when asked."""
    tol = job.tolerances
    try:
        results = compare_all(job.reference, list(job.runners), list(job.feeds), tol.atol,
                              tol.rtol)
    except Exception as exc:  # a deployed graph that cannot run there is a verdict
        why = None if out_of_memory(exc) else deployed_run_failure(exc)
        if why is None:  # not a verdict; a failed allocation is the machine's (exit 2)
            raise
        failed = [ParityResult("failed", why, tol.atol, tol.rtol,
                               ["pytorch", getattr(r, "name", "deployed")])
                  for r in job.runners]
        return CheckOutcome(failed[0], {r.runners[1]: r for r in failed})
    judge_against_pytorch(results, job.reference, list(job.feeds), job.precision)
    by_runner = OrderedDict((r.runners[1], r) for r in results)
    failed = [r for r in results if r.status == "failed"]
    outcome = CheckOutcome(failed[0] if failed else results[0], dict(by_runner))
    if job.iterations > 0:
        outcome.latency = time_runners(job, progress)
    return outcome


def time_runners(job: CheckJob, progress: Progress | None = None) -> dict[str, Latency]:
    """The reference and every runner timed interleaved on the first feed. A recorded
    reference (a big model, run and freed before the deployed graph was loaded) keeps the
    latency it was timed at while it was live."""
    recorded = job.reference if isinstance(job.reference, RecordedRunner) else None
    runners = [*([] if recorded is not None else [job.reference]), *job.runners]
    if progress is not None:
        progress.step("timing")
    with contextlib.ExitStack() as stack:
        for runner in runners:
            stack.enter_context(runner)
        latency = measure_latency(runners, job.feeds[0], job.iterations, job.warmup, progress,
                                  feeds_by_runner=job.feeds_by_runner)
    if recorded is not None and recorded.latency is not None:
        latency = {recorded.name: recorded.latency, **latency}
    return latency
