"""PyTorch's own error at fp16/bf16: the reference model run at that precision on the same
inputs, against the fp32 (or fp64) reference. A low-precision graph is judged against it: no
worse than a stated multiple (export_gelu/tolerances.py `precision_bound`), not a fixed atol."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from export_gelu.check.parity import ParityResult, errors_of
from export_gelu.tolerances import (
    JUDGED_ATOL,
    JUDGED_PYTORCH_PRECISION,
    PRECISION_ERROR_MULTIPLE,
    PRECISION_FLOOR_SHARE,
    precision_bound,
)

LOW_PRECISIONS = ("fp16", "bf16")


class _AtPrecision:
    """Runs a module with every floating-point op at `dtype`: each aten op's float tensors,
    float dtypes and out-of-range float literals are cast as it is called (a dispatch mode),
    so the weights are never copied as a whole, and ops that build fp32 tensors inside the
    program (masks, position biases) follow, as `model.half()` makes an eager model do."""

    def __init__(self, module: Any, dtype: Any) -> None:
        self.module, self.dtype = module, dtype

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_map

        wide = (torch.float32, torch.float64)
        dtype = self.dtype
        limit = float(torch.finfo(dtype).max)

        def cast(v: Any) -> Any:
            if isinstance(v, torch.Tensor) and v.dtype in wide:
                return v.to(dtype)
            if isinstance(v, torch.dtype) and v in wide:
                return dtype
            if isinstance(v, float) and np.isfinite(v) and abs(v) > limit:
                return float(np.copysign(limit, v))  # torch.finfo(float32).min in a mask
            return v

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                                   kwargs: Any = None) -> Any:
                return func(*tree_map(cast, args), **tree_map(cast, kwargs or {}))

        with Mode():
            return self.module(*args, **kwargs)


def _half_runner(reference: Any, precision: str) -> tuple[Any, str]:
    """(a TorchRunner running the reference's module at `precision`, "") or (None, why
    not)."""
    import torch

    from export_gelu.check.torch_runner import TorchRunner

    module = getattr(reference, "module", None)
    if not isinstance(reference, TorchRunner) or not isinstance(module, torch.nn.Module):
        return None, f"the reference ({reference.name}) is not a PyTorch module run here"
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    runner = copy.copy(reference)
    runner.module = _AtPrecision(module, dtype)
    runner.float_dtype = dtype
    runner.name = f"pytorch-{precision}"
    return runner, ""


def _run(runner: Any, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, Any]]:
    with runner:
        return [dict(runner.infer(dict(f), check_inputs=False)) for f in feeds]


def judge_against_pytorch(results: Sequence[ParityResult], reference: Any,
                          feeds: Sequence[Mapping[str, np.ndarray]], precision: str) -> None:
    """Measure PyTorch's own error at `precision` on `feeds` and re-judge each result's
    outputs: one over the fixed tolerance passes when its max abs error is within
    `precision_bound` of PyTorch's. Every result gets the `pytorch_precision` block."""
    if precision not in LOW_PRECISIONS or not results:
        return
    ran = next((r for r in results if r.run_results is not None), None)
    runner, why = _half_runner(reference, precision)
    block: dict[str, Any] = {"precision": precision, "runner": f"pytorch-{precision}",
                             "multiple": PRECISION_ERROR_MULTIPLE,
                             "floor": PRECISION_FLOOR_SHARE * results[0].atol,
                             "status": "measured", "reason": "", "outputs": {}}
    if ran is None or runner is None:
        block.update(status="skipped", reason=why or "no reference outputs to compare with")
    else:
        ref_iters = ran.run_results[0][1]
        try:
            half = _run(runner, feeds)
        except Exception as exc:  # noqa: BLE001 - many kernels lack fp16 on some devices
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            block.update(status="skipped", reason=f"PyTorch could not run the model in "
                                                  f"{precision}: {first}")
        else:
            for name in ref_iters[0].keys():
                if all(name in h for h in half):
                    stats, _ = errors_of([it[name] for it in ref_iters], [h[name] for h in half],
                                         ran.atol, ran.rtol)
                    block["outputs"][name] = stats.max_abs if stats.nonfinite == 0 \
                        else float("inf")
    for result in results:
        result.pytorch_precision = block
        _rejudge(result, block["outputs"])


def _rejudge(result: ParityResult, pytorch: Mapping[str, float]) -> None:
    for name, out in result.outputs.items():
        ours = pytorch.get(name)
        if ours is None:
            continue
        out.pytorch_max_abs = ours
        bound = precision_bound(ours, result.atol)
        if (not out.passed and out.judged == JUDGED_ATOL and np.isfinite(ours)
                and out.nonfinite == 0 and out.max_abs <= bound):
            out.passed, out.judged, out.judged_atol = True, JUDGED_PYTORCH_PRECISION, bound
    if (result.status == "failed" and result.nondeterministic is None and result.outputs
            and all(o.passed for o in result.outputs.values())):
        result.status, result.reason = "passed", ""
    elif result.status == "failed":
        over = [(n, o.pytorch_max_abs) for n, o in result.outputs.items()
                if not o.passed and o.pytorch_max_abs is not None]
        if over:
            result.reason += "; PyTorch's own model at this precision: " + ", ".join(
                f"{n} max abs {own:.3g} (the graph may have "
                f"{precision_bound(own, result.atol):.3g})" for n, own in over)
