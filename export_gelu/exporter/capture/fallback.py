"""Export as a deployment engineer would when an exporter fails on a real model.

1. The exporter the opset calls for (dynamo from 18, TorchScript below).
2. dynamo failed: run the program's decompositions first and export again. torch 2.13's
   dynamo exporter decomposes the graph itself and, on Swin and T5, builds an invalid `view`
   (`Cannot view a tensor with shape … and strides …`); `ExportedProgram.run_decompositions()`
   applied beforehand produces a graph it exports.
3. Still failing: the other exporter. The TorchScript exporter reaches opset 20, so dynamo's
   targets are reached at their own opset; when the TorchScript exporter fails below 18,
   dynamo exports at 18 and the graph is converted down to the target's ceiling afterwards
   (export-gelu's own down-converter, `fit_to_profile`).
4. Nothing works: one line with each exporter's cause, exit 3.

Exporter messages are reduced to their cause: no terminal colour codes, no "next steps"
boilerplate, the `Exception summary` line when torch gives one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeGuard

import onnx

from export_gelu.errors import TargetUnmetError, is_world_fault
from export_gelu.exporter.onnx_export.to_onnx import (
    DYNAMO_MIN_OPSET,
    export_to_onnx,
    exporter_cause,
    quiet_exporter,
)

if TYPE_CHECKING:
    import torch

    from export_gelu.exporter.inputs.call_plan import CallPlan
    from export_gelu.exporter.torch_values import PyTree

#: The TorchScript exporter's highest opset in torch 2.13
#: (torch/onnx/_constants.py: ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET).
TORCHSCRIPT_MAX_OPSET = 20


def _detail(exc: TargetUnmetError) -> str:
    """The cause part of export_to_onnx's message."""
    text = str(exc)
    return text.split(": ", 1)[1] if ": " in text else text


def _is_script(module: torch.nn.Module | None) -> TypeGuard[torch.jit.ScriptModule]:
    import torch

    return isinstance(module, torch.jit.ScriptModule)


def export_with_fallback(module: torch.nn.Module | None, args: tuple[PyTree, ...],
                         input_names: Sequence[str], opset: int, *,
                         program: torch.export.ExportedProgram | None = None,
                         plan: CallPlan | None = None,
                         dynamic_axes: dict[str, dict[int, str]] | None = None,
                         ) -> tuple[onnx.ModelProto, str, list[str]]:
    """(model, exporter used, notes): `export_to_onnx`, retried as the module docstring says.

    `dynamic_axes` (the TorchScript exporter's) keep ranged axes symbolic on that path.

    The model may come back at a higher opset than asked (dynamo's 18 for a TorchScript
    failure below 18); `fit_to_profile` converts it down to the target's ceiling.
    """
    first_exporter = "dynamo" if opset >= DYNAMO_MIN_OPSET else "torchscript"
    try:
        model, used = export_to_onnx(module, args, input_names, opset, program=program,
                                     plan=plan, dynamic_axes=dynamic_axes)
        return model, used, []
    except TargetUnmetError as exc:
        failures = [f"{first_exporter} at opset {opset}: {_detail(exc)}"]
        first_error = exc

    if first_exporter == "dynamo" and program is not None:
        try:
            with quiet_exporter():
                decomposed = program.run_decompositions()
            model, used = export_to_onnx(None, args, input_names, opset, program=decomposed,
                                         plan=plan)
            return model, used, [f"the dynamo exporter failed on the program as captured "
                                 f"({_detail(first_error)}); exported after running the "
                                 "program's decompositions first"]
        except TargetUnmetError as exc:
            failures.append(f"dynamo after decompositions: {_detail(exc)}")
        except Exception as exc:  # noqa: BLE001 - run_decompositions itself failed
            if is_world_fault(exc):
                raise
            failures.append(f"decompositions: {exporter_cause(exc)}")

    if first_exporter == "dynamo":
        other, other_opset = "torchscript", min(opset, TORCHSCRIPT_MAX_OPSET)
    elif program is not None or module is not None:
        other, other_opset = "dynamo", DYNAMO_MIN_OPSET
    else:
        other = ""
    via = ""
    if other == "dynamo" and program is None and _is_script(module):
        try:  # the dynamo exporter takes no ScriptModule: convert it first
            from export_gelu.exporter.capture.capture import script_program_with_axes

            program = script_program_with_axes(module, args, input_names, plan, dynamic_axes)
            module = None
            via = " through an ExportedProgram (TS2EPConverter)"
        except Exception as exc:  # noqa: BLE001 - reported with the other causes
            if is_world_fault(exc):
                raise
            failures.append(f"TS2EPConverter: {exporter_cause(exc)}")
    if other:
        try:
            source = program
            if other == "torchscript" and program is not None:
                from export_gelu.exporter.onnx_export.to_onnx import prepare_program_for_torchscript

                prepare_program_for_torchscript(program, other_opset)
            model, used = export_to_onnx(module if program is None else None, args, input_names,
                                         other_opset, program=source, plan=plan,
                                         exporter=other, dynamic_axes=dynamic_axes)
            why = "; ".join(failures)
            tail = "" if other_opset == opset else \
                f" (converted to opset {opset} by the target fit)"
            return model, used, [f"the {first_exporter} exporter failed ({why}); exported with "
                                 f"the {other} exporter at opset {other_opset}{via} instead{tail}"]
        except TargetUnmetError as exc:
            failures.append(f"{other} at opset {other_opset}: {_detail(exc)}")
    traced = traced_dtype_cause(module, failures)
    if traced:
        raise TargetUnmetError(traced) from first_error
    hint = refusal_hint(failures)
    raise TargetUnmetError("no exporter could export this model: " + "; ".join(failures)
                           + (f" ({hint})" if hint else "")) from first_error


_MIXED_DTYPES = re.compile(r"(Float and (Half|BFloat16)|(Half|BFloat16) and Float|same dtype"
                           r"|expected scalar type (Float|Half|BFloat16)"
                           r"|dtype.{0,40}(Half|BFloat16|float16|bfloat16))")


def mixes_dtypes(message: str) -> bool:
    """Whether torch's error says an op was given float32 and fp16/bf16 together."""
    return bool(_MIXED_DTYPES.search(message))


def traced_dtype_cause(module: torch.nn.Module | None, failures: Sequence[str]) -> str:
    """For a ScriptModule cast to fp16/bf16 whose export failed mixing float32 with the
    low precision: the message naming the dtype its trace recorded as the cause, or ""."""
    import torch

    if not _is_script(module):
        return ""
    low = {p.dtype for p in module.parameters()} & {torch.float16, torch.bfloat16}
    mixed = next((f for f in failures if _MIXED_DTYPES.search(f)), "")
    if not low or not mixed:
        return ""
    name = "fp16" if torch.float16 in low else "bf16"
    return (f"the dtype traced into the ScriptModule is the cause: torch.jit.trace/script "
            f"recorded float32 for tensors it makes (dtype arguments, casts), so cast to "
            f"{name} it mixes float32 with {name} ({mixed}); export it with --precision "
            f"fp32, or save the model it was traced from with torch.export.save and export "
            f"that ExportedProgram with --precision {name}")


_UNSUPPORTED = re.compile(r"Exporting the operator '([^']+)' to ONNX opset version (\d+) is "
                          r"not supported(?:\. Support for this operator was added in version "
                          r"(\d+))?")


def refusal_hint(failures: Sequence[str]) -> str:
    """For an op the TorchScript exporter has no form of at the opset: the op, the opset it
    needs and the targets whose opset reaches it (or the route that takes it), in words."""
    from export_gelu.targets import PROFILES

    for text in failures:
        found = _UNSUPPORTED.search(text)
        if not found:
            continue
        op, opset, since = found.group(1), int(found.group(2)), found.group(3)
        need = int(since) if since else DYNAMO_MIN_OPSET
        takers = [n for n, p in PROFILES.items() if p.opset_ceiling >= need]
        trt = [n for n in takers if n.startswith("trt")]
        shown = ", ".join([n for n in takers if not n.startswith("trt")]
                          + ([f"{trt[0]}–{trt[-1]}" if len(trt) > 1 else trt[0]] if trt else []))
        how = (f"{op} needs opset {need}" if since else
               f"{op} has no TorchScript-exporter form at opset {opset}; the dynamo exporter "
               f"(opset {need}, through torch.export) takes it")
        return f"{how}: targets that reach it: {shown or 'none'}"
    return ""
