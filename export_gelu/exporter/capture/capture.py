"""Capture a loaded model as a torch.export ExportedProgram, the graph the fx passes work on."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import torch

from export_gelu.errors import BadInputError
from export_gelu.exporter.capture.dynamic_capture import export_dynamic
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter
from export_gelu.exporter.precision_cast import PRECISION_DTYPES, cast_args, cast_copy, fold_weights

if TYPE_CHECKING:
    from export_gelu.exporter.feeds.dynamic_plan import DynamicPlan
    from export_gelu.exporter.hf.probed_capture import ProbedCapture
    from export_gelu.exporter.inputs.call_plan import CallPlan
    from export_gelu.exporter.torch_values import AxisDims, PyTree

T = TypeVar("T")
#: What capture() tells the progress channel it does.
CAPTURING = "capturing the model with torch.export"
USING_PROGRAM = "using the loaded ExportedProgram as it is (no capture)"
LOADING_SHARED = "reusing the first form's capture (a saved and loaded copy)"
USING_PROBED = "using the capture the dim probe made (no second torch.export)"


def module_for_precision(loaded: LoadedModel, precision: str) -> torch.nn.Module:
    """The module to export: the original, or a cast copy for fp16/bf16 (the original stays;
    weights made from weights computed before the cast, precision_cast.py). A folder graph the
    dim probe captured at this precision is exported from the probe's copy, so that its
    capture is the one the probe made (hf/probed_capture.py)."""
    module = loaded.reference_module()
    assert module is not None, "an ONNX model has no module to export"
    if precision == "fp32":
        return module
    probed = loaded.probed
    if probed is not None and probed.precision == precision:
        return probed.module
    return cast_copy(module, precision)


def _then_with_grad(fn: Callable[[], T]) -> T:
    """`fn()` in the caller's grad mode (no_grad), then once more with grad enabled.

    Under no_grad, capturing some converted traces fails (a traced Swin: "Could not guard on
    data-dependent expression Eq(1, u2*u3)" at its scaled_dot_product_attention, torch 2.13;
    the converter makes the trace's sizes data-dependent ints); with grad enabled the same
    capture succeeds, and the program computes the same either way (parity checks it). The
    second failure is the one reported. `fn` must build what it captures afresh: a failed
    torch.export leaves its module altered.
    """
    if torch.is_grad_enabled():
        return fn()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # a failure here prints the graph
            return fn()
    except Exception:  # noqa: BLE001 - retried once; the retry's failure is the one raised
        with torch.enable_grad():
            return fn()


def script_to_program(script: torch.jit.ScriptModule, pos: tuple[PyTree, ...], kw: dict[str, PyTree]
                      ) -> torch.export.ExportedProgram:
    """A TorchScript module as an ExportedProgram (TS2EPConverter)."""
    from torch._export.converter import TS2EPConverter

    return _then_with_grad(lambda: TS2EPConverter(script, pos, kw or None).convert())


def static_program(program: torch.export.ExportedProgram, pos: tuple[PyTree, ...],
                   kw: dict[str, PyTree]) -> torch.export.ExportedProgram:
    """`program` (TS2EPConverter's) captured again at the example's sizes: the converter
    makes every input dim symbolic (even a channel dim, named after its size: "3"), and a
    model exported without --dynamic keeps its dims static. The converted program when the
    capture fails (its dims stay symbolic)."""
    def again() -> torch.export.ExportedProgram:
        return torch.export.export(program.module(), pos, kw or None, strict=False)

    try:
        return _then_with_grad(again)
    except Exception:  # noqa: BLE001 - keep what the converter made
        return program


def script_program_with_axes(script: torch.jit.ScriptModule, args: tuple[PyTree, ...],
                             input_names: Sequence[str], plan: CallPlan | None,
                             dynamic_axes: dict[str, dict[int, str]] | None
                             ) -> torch.export.ExportedProgram:
    """A TorchScript module as an ExportedProgram whose `dynamic_axes` ({input: {axis: dim
    name}}, the TorchScript exporter's) are symbolic: TS2EPConverter's program captured again
    with those dims (one `Dim` per name). The route for what the TorchScript exporter cannot
    export (a dict output, attention below opset 14) on the dynamic path."""
    from export_gelu.exporter.inputs.call_plan import CallPlan

    plan = plan or CallPlan(tuple(input_names))
    pos, kw = plan.split_values(args)
    program = script_to_program(script, pos, kw)
    dims: dict[str, torch.export.Dim] = {}

    def spec(name: str) -> AxisDims:
        axes = (dynamic_axes or {}).get(name) or {}
        return {a: dims.setdefault(d, torch.export.Dim(d)) for a, d in axes.items()} or None

    ds_pos, ds_kw = plan.split_values(tuple(spec(n) for n in input_names))
    shapes = (*ds_pos, *ds_kw.values()) if dynamic_axes else None

    def again() -> torch.export.ExportedProgram:
        return torch.export.export(program.module(), pos, kw or None, dynamic_shapes=shapes,
                                   strict=False)

    with quiet_exporter(), torch.no_grad():
        return _then_with_grad(again)


def _script_at_precision(script: torch.jit.ScriptModule, pos: tuple[PyTree, ...],
                         kw: dict[str, PyTree], precision: str) -> torch.export.ExportedProgram:
    """A TorchScript model captured in fp16/bf16: its trace records float32 dtypes, so it is
    converted in float32 and the converted graph is cast and retargeted (`retarget.py`)."""
    from export_gelu.passes.compat.precision.retarget import clamped_literals, retarget_precision

    dtype = PRECISION_DTYPES[precision]
    program = script_to_program(script, cast_args(pos, "fp32"),
                                dict(zip(kw, cast_args(tuple(kw.values()), "fp32"))))

    # a fresh module each try: a failed export alters it
    def cast_and_capture() -> torch.export.ExportedProgram:
        gm = program.module()
        fold_weights(gm)
        gm = gm.to(dtype)
        retarget_precision(gm, dtype)
        captured = torch.export.export(gm, pos, kw or None, strict=False)
        vars(captured)["export_gelu_clamped"] = clamped_literals(gm)  # for the report's note
        return captured

    return _then_with_grad(cast_and_capture)


def capture(loaded: LoadedModel, module: torch.nn.Module, args: tuple[PyTree, ...],
            precision: str, plan: CallPlan | None = None, dynamic: DynamicPlan | None = None,
            *, say: Callable[[str], None] = lambda _: None
            ) -> tuple[torch.export.ExportedProgram | None, str | None]:
    """An ExportedProgram for `module` on `args` (feed order; `plan` says which go by
    keyword), or (None, why not) when capture fails.

    `dynamic` (a DynamicPlan with ranged dims) keeps those axes symbolic and lets torch tie
    the axes its flags left out (dynamic_capture.py; the plan gains them); a range the model
    does not allow is bad input (exit 2), not a capture failure. While a comparison holds
    `loaded.captures`, a TorchScript model's static capture made before for the same call is
    loaded from it (shared_capture.py). `say` announces which of these it does (progress).
    """
    if loaded.exported is not None and precision in ("fp32", "fp64"):
        say(USING_PROGRAM)
        return loaded.exported, None

    if loaded.captures is not None and dynamic is None \
            and isinstance(module, torch.jit.ScriptModule):  # a comparison's graphs: one capture
        return loaded.captures.capture(
            args, precision, plan,
            lambda: _capture(loaded, module, args, precision, plan, None, say=say),
            lambda: say(LOADING_SHARED))
    return _capture(loaded, module, args, precision, plan, dynamic, say=say)


def _capture(loaded: LoadedModel, module: torch.nn.Module, args: tuple[PyTree, ...],
             precision: str, plan: CallPlan | None, dynamic: DynamicPlan | None, *,
             say: Callable[[str], None]
             ) -> tuple[torch.export.ExportedProgram | None, str | None]:
    """capture()'s torch.export (or TS2EPConverter) call itself, or the dim probe's program
    when the probe made this very call."""
    from export_gelu.exporter.inputs.call_plan import CallPlan

    if dynamic is not None and isinstance(module, torch.jit.ScriptModule):
        return None, ("TS2EPConverter keeps the traced shapes; the TorchScript module is "
                      "exported with dynamic_axes instead")
    plan = plan or CallPlan(tuple(f"{i}" for i in range(len(args))))
    pos, kw = plan.split_values(args)

    def in_order(dynamic_shapes: tuple[AxisDims, ...] | None) -> tuple[object, ...] | None:
        if dynamic_shapes is None:
            return None
        ds_pos, ds_kw = plan.split_values(tuple(dynamic_shapes))  # the signature's order
        return (*ds_pos, *ds_kw.values())

    def probed_for(shapes: tuple[object, ...] | None) -> ProbedCapture | None:
        """The dim probe's capture when it was this very call (hf/probed_capture.py)."""
        probed = loaded.probed
        return probed if probed is not None and not kw and probed.fits(module, pos, shapes) \
            else None

    def export(dynamic_shapes: tuple[AxisDims, ...] | None) -> torch.export.ExportedProgram:
        shapes = in_order(dynamic_shapes)
        probed = probed_for(shapes)
        if probed is not None:
            say(USING_PROBED)
            loaded.probed = None  # taken once: the fx passes edit it
            return probed.program
        say(CAPTURING)
        return torch.export.export(module, pos, kw or None, dynamic_shapes=shapes, strict=False)

    try:
        with quiet_exporter(), torch.no_grad():
            if isinstance(module, torch.jit.ScriptModule):
                say(CAPTURING)
                if precision in ("fp16", "bf16") and \
                        isinstance(loaded.module, torch.jit.ScriptModule):
                    return _script_at_precision(loaded.module, pos, kw, precision), None
                return static_program(script_to_program(module, pos, kw), pos, kw), None
            if dynamic is None:
                return export(None), None
            names = [*plan.positional, *(n for n, _ in plan.keyword)]
            sizes = {n: tuple(getattr(a, "shape", ())) for n, a in zip(names, args)}
            return export_dynamic(dynamic, sizes, export,
                                  lambda spec: probed_for(in_order(spec)) is not None), None
    except BadInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any capture failure means "no fx passes"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return None, f"{type(exc).__name__}: {first}"
