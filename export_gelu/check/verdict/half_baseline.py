"""PyTorch's own error at fp16/bf16: the reference model run at that precision on the same
inputs, against the fp32 (or fp64) reference. A low-precision graph is judged against it: no
worse than a stated multiple (export_gelu/tolerances.py `precision_bound`), not a fixed atol."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.check.verdict.parity import ParityResult, errors_of
from export_gelu.check.verdict.reduced_precision import SCALE_SHARE, judge_reduced
from export_gelu.json_value import JsonObject
from export_gelu.tolerances import (
    JUDGED_ATOL,
    JUDGED_PYTORCH_PRECISION,
    PRECISION_ERROR_MULTIPLE,
    PRECISION_FLOOR_SHARE,
)

if TYPE_CHECKING:
    import torch
    from polygraphy.backend.base import BaseRunner

    from export_gelu.check.runners.torch_runner import TorchRunner

#: output → PyTorch's own max abs error, the output's scale, and its share of it
UnsafeRows = Mapping[str, Mapping[str, float]]

LOW_PRECISIONS = ("fp16", "bf16")


class _AtPrecision:
    """Runs a module with every floating-point op at `dtype`: each aten op's float tensors,
    float dtypes and out-of-range float literals are cast as it is called (a dispatch mode),
    so the weights are never copied as a whole, and ops that build fp32 tensors inside the
    program (masks, position biases) follow, as `model.half()` makes an eager model do."""

    def __init__(self, module: Callable[..., object], dtype: torch.dtype) -> None:
        self.module, self.dtype = module, dtype

    def __call__(self, *args: object, **kwargs: object) -> object:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_map

        wide = (torch.float32, torch.float64)
        dtype = self.dtype
        limit = float(torch.finfo(dtype).max)

        def cast(v: object) -> object:
            if isinstance(v, torch.Tensor) and v.dtype in wide:
                return v.to(dtype)
            if isinstance(v, torch.dtype) and v in wide:
                return dtype
            if isinstance(v, float) and np.isfinite(v) and abs(v) > limit:
                return float(np.copysign(limit, v))  # torch.finfo(float32).min in a mask
            return v

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Callable[..., object], types: object,
                                   args: tuple[object, ...] = (),
                                   kwargs: Mapping[str, object] | None = None) -> object:
                return func(*tree_map(cast, args), **tree_map(cast, kwargs or {}))

        with Mode():
            return self.module(*args, **kwargs)


def _half_runner(reference: BaseRunner, precision: str) -> tuple[TorchRunner | None, str]:
    """(a TorchRunner running the reference's module at `precision`, "") or (None, why
    not)."""
    import torch

    from export_gelu.check.runners.torch_runner import TorchRunner

    module = getattr(reference, "module", None)
    if not isinstance(reference, TorchRunner) or not isinstance(module, torch.nn.Module):
        return None, f"the reference ({reference.name}) is not a PyTorch module run here"
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    runner = copy.copy(reference)
    runner.module = _AtPrecision(module, dtype)
    runner.float_dtype = dtype
    runner.name = f"pytorch-{precision}"
    return runner, ""


def _run(runner: BaseRunner, feeds: Sequence[Mapping[str, np.ndarray]]
         ) -> list[dict[str, np.ndarray]]:
    with runner:
        return [dict(runner.infer(dict(f), check_inputs=False)) for f in feeds]


def judge_against_pytorch(results: Sequence[ParityResult], reference: BaseRunner,
                          feeds: Sequence[Mapping[str, np.ndarray]], precision: str) -> None:
    """Measure PyTorch's own error at `precision` on `feeds` and re-judge each result's
    outputs by check/verdict/reduced_precision.py: one over the fixed tolerance passes when its max
    abs error is within `precision_bound` of PyTorch's and within SCALE_SHARE of the output's
    scale. Where PyTorch's own error exceeds that share, the precision is named unsafe for the
    model (fp16: with PyTorch's bf16 error measured too, to say whether bf16 is a way out).
    Every result gets the `pytorch_precision` block."""
    if precision not in LOW_PRECISIONS or not results:
        return
    ran = next((r for r in results if r.run_results is not None), None)
    errors, why = _errors_at(reference, feeds, ran, precision)
    outputs = errors or {}
    unsafe = _unsafe_outputs(results[0], errors) if errors is not None else {}
    block: JsonObject = {"precision": precision, "runner": f"pytorch-{precision}",
                         "multiple": PRECISION_ERROR_MULTIPLE,
                         "floor": PRECISION_FLOOR_SHARE * results[0].atol,
                         "scale_share": SCALE_SHARE,
                         "status": "measured" if errors is not None else "skipped",
                         "reason": why if errors is None else "", "outputs": outputs,
                         "unsafe": unsafe}
    advice = ""
    if unsafe:
        other = "bf16" if precision == "fp16" else None
        measured = _errors_at(reference, feeds, ran, other)[0] if other else None
        if other and measured is not None:
            block[other] = measured
        advice = way_out(precision, results[0], unsafe,
                         keep_in_fp32(getattr(reference, "module", None)), other, measured)
    for result in results:
        result.pytorch_precision = block
        _rejudge(result, outputs, unsafe, precision, advice)


def _errors_at(reference: BaseRunner, feeds: Sequence[Mapping[str, np.ndarray]],
               ran: ParityResult | None, precision: str | None
               ) -> tuple[dict[str, float] | None, str]:
    """(output → PyTorch's max abs error at `precision` against the reference's outputs in
    `ran`, "") or (None, why it was not measured)."""
    if precision is None:
        return None, "no precision to measure"
    runner, why = _half_runner(reference, precision)
    if ran is None or runner is None or ran.run_results is None:
        return None, why or "no reference outputs to compare with"
    ref_iters = ran.run_results[0][1]
    try:
        half = _run(runner, feeds)
    except Exception as exc:  # noqa: BLE001 - many kernels lack fp16 on some devices
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return None, f"PyTorch could not run the model in {precision}: {first}"
    errors = {}
    for name in ref_iters[0].keys():
        if all(name in h for h in half):
            stats, _ = errors_of([it[name] for it in ref_iters], [h[name] for h in half],
                                 ran.atol, ran.rtol)
            errors[name] = stats.max_abs if stats.nonfinite == 0 else float("inf")
    return errors, ""


def _unsafe_outputs(result: ParityResult, pytorch: Mapping[str, float]
                    ) -> dict[str, dict[str, float]]:
    """output → PyTorch's error and its share of the scale, where that share makes the
    precision unsafe for the model (the same for every runner: it reads only the
    reference)."""
    found: dict[str, dict[str, float]] = {}
    for name, out in result.outputs.items():
        ours = pytorch.get(name)
        if ours is None:
            continue
        verdict = judge_reduced(ours, out.max_abs, out.ref_scale, result.atol)
        if verdict.unsafe:
            found[name] = {"pytorch_max_abs": ours, "ref_scale": out.ref_scale,
                           "share": verdict.reference_share}
    return found


def _rejudge(result: ParityResult, pytorch: Mapping[str, float], unsafe: UnsafeRows,
             precision: str, advice: str) -> None:
    """Each output against PyTorch's own error at `precision` and against its own scale
    (check/verdict/reduced_precision.py); where the precision is `unsafe` for the model the reason
    says so, with the numbers and `advice`, passed or failed: never a bare PASSED."""
    bounds: dict[str, float] = {}
    for name, out in result.outputs.items():
        ours = pytorch.get(name)
        if ours is None:
            continue
        out.pytorch_max_abs = ours
        verdict = judge_reduced(ours, out.max_abs, out.ref_scale, result.atol)
        bounds[name] = verdict.bound
        if (not out.passed and out.judged == JUDGED_ATOL and out.nonfinite == 0
                and verdict.passed):
            out.passed, out.judged, out.judged_atol = True, JUDGED_PYTORCH_PRECISION, \
                verdict.bound
    if (result.status == "failed" and result.nondeterministic is None and result.outputs
            and all(o.passed for o in result.outputs.values())):
        result.status, result.reason = "passed", ""
    elif result.status == "failed":
        over = [(n, o.pytorch_max_abs) for n, o in result.outputs.items()
                if not o.passed and n in bounds]
        if over:
            result.reason += "; PyTorch's own model at this precision: " + ", ".join(
                f"{n} max abs {own:.3g} (the graph may have {bounds[n]:.3g})"
                for n, own in over)
    if unsafe:
        note = unsafe_text(precision, result, unsafe, advice)
        result.reason = f"{result.reason}; {note}" if result.reason else note


def _percent(share: float) -> str:
    if share == 0 or share >= 0.01:
        return f"{share:.0%}"
    return f"{share:.1%}" if share >= 0.001 else "<0.1%"


def unsafe_text(precision: str, result: ParityResult, unsafe: UnsafeRows,
                advice: str) -> str:
    """The verdict's words for a precision the model itself cannot compute in: PyTorch's own
    error and the graph's, each with its share of the output's scale, and the way out."""
    parts = []
    for name, row in unsafe.items():
        out = result.outputs[name]
        parts.append(f"{name} by {row['pytorch_max_abs']:.3g} ({_percent(row['share'])} of "
                     f"|ref| ≤ {row['ref_scale']:.3g}; the graph's error: {out.max_abs:.3g}, "
                     f"{_percent(out.max_abs / row['ref_scale'] if row['ref_scale'] else 0)}"
                     ")")
    return (f"{precision} is unsafe for this model: PyTorch's own {precision} errs on "
            f"{'; '.join(parts)}: more than {SCALE_SHARE:.0%} of the output's scale, so "
            f"matching it means nothing and the graph is judged against the output's scale "
            f"(within {SCALE_SHARE:.0%}); {advice}")


def way_out(precision: str, result: ParityResult, unsafe: UnsafeRows,
            keep: Sequence[str], other: str | None, measured: Mapping[str, float] | None
            ) -> str:
    """What to do: keep what the model declares (or what overflows) in fp32, or another
    precision: `other` where PyTorch's own error there (`measured`) is within the share on
    every unsafe output, else fp32."""
    kept = (f"keep {', '.join(keep)} in fp32 (the model's own _keep_in_fp32_modules)"
            if keep else "keep the layers that overflow in fp32")
    if other is None:
        return f"{kept}, or export with --precision fp32"
    if measured is None:
        return f"{kept}, or export with --precision {other} or fp32"
    errs = [(n, measured.get(n, float("inf"))) for n in unsafe]
    safe = all(not judge_reduced(e, 0.0, result.outputs[n].ref_scale, result.atol).unsafe
               for n, e in errs)
    worst = max(errs, key=lambda t: t[1])
    if safe:
        return (f"{kept}, or export with --precision {other} (PyTorch's own {other} errs by "
                f"at most {worst[1]:.3g} there, within {SCALE_SHARE:.0%}) or fp32")
    return (f"{kept}, or export with --precision fp32 ({other} is no way out: PyTorch's own "
            f"{other} errs by {worst[1]:.3g} on {worst[0]})")


def keep_in_fp32(module: object) -> list[str]:
    """The module names the model declares to keep in fp32 (transformers'
    `_keep_in_fp32_modules`, e.g. T5's `wo`), from the module or any submodule."""
    import torch

    names: list[str] = []
    if isinstance(module, torch.nn.Module):
        for sub in module.modules():
            for name in getattr(sub, "_keep_in_fp32_modules", None) or ():
                if isinstance(name, str) and name not in names:
                    names.append(name)
    return names
