"""torch → ONNX at a target's opset, choosing the exporter that can reach it (docs/exporters.md)."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from export_gelu.errors import (
    BadInputError,
    TargetUnmetError,
    WorldError,
    is_world_fault,
    stated_cause,
)
from export_gelu.exporter.torch_compat import dynamo_export_options
from export_gelu.graph.provenance import fill_from_neighbours
from export_gelu.passes.compat.torchscript_export.attention import lower_attention
from export_gelu.passes.compat.torchscript_export.view_writes import functionalize_view_writes

if TYPE_CHECKING:
    import torch

    from export_gelu.exporter.inputs.call_plan import CallPlan
    from export_gelu.exporter.torch_values import PyTree

#: The dynamo exporter cannot produce an opset below this in torch 2.13.
DYNAMO_MIN_OPSET = 18


def default_opset(model: onnx.ModelProto) -> int:
    """The default-domain opset a model imports."""
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 0


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """Silence the exporters' chatter (progress prints, deprecation and registry warnings)."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "onnxscript", "torch.export",
                                               "torch._export", "torch.fx.experimental",
                                               "torch._subclasses", "torch._dynamo")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        # fake-tensor propagation logs the exceptions it raises, at ERROR, before the
        # exporter catches or reports them: twenty lines of traceback for one cause
        lg.setLevel(logging.CRITICAL if lg.name == "torch._subclasses" else logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def exporter_for_opset(opset: int) -> str:
    return "dynamo" if opset >= DYNAMO_MIN_OPSET else "torchscript"


def _export_dynamo(program: torch.nn.Module | torch.export.ExportedProgram,
                   args: tuple[PyTree, ...], input_names: Sequence[str], opset: int,
                   kwargs: dict[str, PyTree] | None = None) -> onnx.ModelProto:
    import torch

    from export_gelu.exporter.saving.workdir import current_workdir

    with quiet_exporter():
        onnx_program = torch.onnx.export(program, args, kwargs=kwargs or None, dynamo=True,
                                         opset_version=opset,
                                         input_names=list(input_names) or None, verbose=False,
                                         **dynamo_export_options())
    assert onnx_program is not None  # dynamo=True returns the program
    folder = current_workdir()
    if folder is None:
        return onnx_program.model_proto
    # a big model: its weights go to a file one tensor at a time, never into a second copy
    path = Path(tempfile.mkdtemp(prefix="dynamo-", dir=folder)) / "model.onnx"
    with quiet_exporter():
        onnx_program.save(str(path), external_data=True)
    # the weights are on disk: let go of them (onnxscript's rewrite rules keep the last graph
    # they matched alive, and with it every torch tensor its initializers wrap)
    for value in onnx_program.model.graph.initializers.values():
        value.const_value = None
    del onnx_program
    return _graph_of(path)


def _graph_of(path: Path) -> onnx.ModelProto:
    from export_gelu.onnx_weights import load_graph

    return load_graph(path)


def _export_torchscript(module: torch.nn.Module, args: tuple[PyTree, ...],
                        input_names: Sequence[str],
                        opset: int, dynamic_axes: dict[str, dict[int, str]] | None = None
                        ) -> onnx.ModelProto:
    import torch

    from export_gelu.exporter.onnx_export.scopes import record_scopes, source_frames
    from export_gelu.exporter.onnx_export.strided_views import layout_true_as_strided
    from export_gelu.exporter.saving.workdir import current_workdir

    folder = current_workdir()
    with contextlib.ExitStack() as stack:
        tmp = (tempfile.mkdtemp(prefix="torchscript-", dir=folder) if folder is not None
               else stack.enter_context(tempfile.TemporaryDirectory(prefix="export-gelu-")))
        path = Path(tmp) / "model.onnx"
        with quiet_exporter(), source_frames() as frames, \
                layout_true_as_strided(opset, static=not dynamic_axes):
            # frames: each node's doc string holds the trace that made it (read, then cleared)
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=opset,
                              input_names=list(input_names) or None,
                              training=torch.onnx.TrainingMode.PRESERVE,
                              do_constant_folding=True, dynamic_axes=dynamic_axes or None,
                              verbose=frames)
        if folder is not None:  # a big model: its weights stay in the exporter's files
            model = _graph_of(path)
        else:
            model = onnx.load(str(path), load_external_data=True)
    record_scopes(model, module)
    return model


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def exporter_cause(exc: BaseException, limit: int = 300) -> str:
    """The cause an exporter's exception states, on one line, without colour codes."""
    text = _ANSI.sub("", str(exc)).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "## Exception summary" in lines:
        after = lines[lines.index("## Exception summary") + 1:]
        if after:
            lines = after
    cause = stated_cause("\n".join(lines)) if lines else type(exc).__name__
    cause = re.sub(r"^<class '([\w.]+)'>:\s*", r"\1: ", cause)
    if type(exc).__name__ not in cause and ":" not in cause[:40]:
        cause = f"{type(exc).__name__}: {cause}"
    return cause[:limit]


def export_to_onnx(module: torch.nn.Module | None, args: tuple[PyTree, ...],
                   input_names: Sequence[str], opset: int, *,
                   program: torch.export.ExportedProgram | None = None,
                   plan: CallPlan | None = None, exporter: str | None = None,
                   dynamic_axes: dict[str, dict[int, str]] | None = None
                   ) -> tuple[onnx.ModelProto, str]:
    """Export to ONNX at exactly `opset`; returns the model and the exporter used.

    `program` (an ExportedProgram) is used by the dynamo exporter, which keeps its symbolic
    dims; the TorchScript exporter needs a module (`program.module()` when only a program is
    at hand) and keeps the axes `dynamic_axes` names symbolic ({input: {axis: dim name}}).
    `args` are in feed order; `plan` (a CallPlan) says which of them the model takes by
    keyword. `exporter` forces one ("dynamo" from opset 18, "torchscript" up to 20); default
    by opset.
    """
    from export_gelu.exporter.inputs.call_plan import CallPlan, positional_module

    exporter = exporter or exporter_for_opset(opset)
    plan = plan or CallPlan(tuple(input_names))
    try:
        if exporter == "dynamo":
            pos, kw = plan.split_values(args)
            source = program if program is not None else module
            if source is None:
                raise ValueError("neither a module nor a program to export")
            model = _export_dynamo(source, pos, input_names, opset, kw)
        else:
            target = module if module is not None else \
                program.module() if program is not None else None
            if target is None:
                raise ValueError("neither a module nor a program to export")
            if plan.uses_keywords:
                target = positional_module(target, plan)
            model = _export_torchscript(target, args, input_names, opset, dynamic_axes)
    except (BadInputError, WorldError):
        raise
    except Exception as exc:  # noqa: BLE001 - exporter failures are reported, not re-thrown
        from export_gelu.exporter.saving.workdir import refused_write

        if is_world_fault(exc):
            raise  # the disk refused the weights: no other exporter would fare better
        refused = refused_write(exc)
        if refused is not None:
            raise refused from exc

        raise TargetUnmetError(
            f"the {exporter} exporter could not export this model at opset {opset}: "
            f"{exporter_cause(exc)}"
        ) from exc
    # nodes an exporter's own optimizer made without metadata (dynamo's Split of a fused
    # projection) take their neighbour's module
    fill_from_neighbours(model.graph)
    produced = default_opset(model)
    if produced != opset:
        raise TargetUnmetError(
            f"asked the {exporter} exporter for opset {opset} but it produced opset {produced}"
        )
    refuse_invalid(model, f"the {exporter} exporter (torch {_torch_version()})", opset)
    return model, exporter


def _torch_version() -> str:
    import torch

    return str(torch.__version__).split("+")[0]


def refuse_invalid(model: onnx.ModelProto, who: str, opset: int) -> None:
    """TargetUnmetError naming ONNX's message when `model`, as `who` wrote it, fails strict
    shape inference (an Unsqueeze axis out of range, a type mismatch): no runtime would load
    it, and nothing export-gelu does afterwards repairs it."""
    from export_gelu.graph import skeleton

    try:
        onnx.shape_inference.infer_shapes(skeleton(model), check_type=True, strict_mode=True)
    except onnx.shape_inference.InferenceError as exc:
        text = " ".join(str(exc).split())[:300]
        raise TargetUnmetError(f"{who} wrote an invalid graph at opset {opset}: {text}") from exc


def prepare_program_for_opset(program: torch.export.ExportedProgram, opset: int) -> list[str]:
    """Rewrite `program` in place for export at `opset`; return notes for the report.

    Below the dynamo exporter's range the TorchScript exporter is used: it has no attention
    below opset 14, and from 14 its attention mixes fp32 into fp16 graphs and emits IsNaN
    and Where; attention is lowered to plain MatMul/Softmax for it at every opset. It also
    drops writes into views (`x[..., 0] = y`) of a program: those become the tensors they make.
    """
    if opset >= DYNAMO_MIN_OPSET:
        return []
    return prepare_program_for_torchscript(program, opset)


def prepare_program_for_torchscript(program: torch.export.ExportedProgram, opset: int) -> list[str]:
    """`prepare_program_for_opset`'s rewrites, whatever the opset; notes for the report."""
    notes = []
    writes = functionalize_view_writes(program)
    if writes:
        notes.append(f"{writes} write(s) into a tensor view made functional for the "
                     "TorchScript exporter (it would drop them)")
    n = lower_attention(program)
    if n:
        notes.insert(0, f"{n} scaled_dot_product_attention call(s) lowered to MatMul/Softmax "
                        f"for the TorchScript exporter (opset {opset})")
    return notes
