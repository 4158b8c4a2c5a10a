"""The INT8/FP8 verdict on a Q/DQ graph, for export and verify alike: the graph in ONNX Runtime
(as written), PyTorch in float32, and PyTorch at the graph's own scales (fake-quant,
quantize/reference.py) on the same feeds, judged by quantize/judge.py."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import onnx

from export_gelu.check.reference.runner import model_runner
from export_gelu.check.runners.deployed import deployed_feed
from export_gelu.errors import TargetUnmetError
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.quantize import QuantVerdict, judge, plan_quantization, read_qdq, run_graph
from export_gelu.quantize.read_qdq import QDQ_OPS
from export_gelu.quantize.reference import fake_quantized, float_weights
from export_gelu.quantize.strip import without_qdq
from export_gelu.results.quantize import QdqGraph, QdqJudged

if TYPE_CHECKING:
    from torch import nn

#: What the verdict compares with, in words (the report's `judged_by`).
JUDGED_BY = "PyTorch with the graph's scales (fake-quant of weights and inputs)"

Feeds = Sequence[Mapping[str, np.ndarray]]


def logits_of(model: onnx.ModelProto) -> list[str]:
    """The outputs whose top-1 agreement is counted: those named as logits."""
    return [o.name for o in model.graph.output if "logits" in o.name.lower()]


def _torch_runs(loaded: LoadedModel, module: nn.Module, feeds: Feeds, outputs: list[str],
                threads: int) -> list[dict[str, np.ndarray]]:
    """The module's outputs per feed; one runner per input shape (a runner takes the shapes
    it was made for: feeds at several --dynamic sizes get one each)."""
    runs: list[dict[str, np.ndarray]] = [{} for _ in feeds]
    groups: dict[tuple[tuple[str, tuple[int, ...]], ...], list[int]] = {}
    for i, f in enumerate(feeds):
        groups.setdefault(tuple((k, np.shape(v)) for k, v in f.items()), []).append(i)
    for members in groups.values():
        runner = model_runner(loaded, dict(feeds[members[0]]), outputs, threads,  # type: ignore[arg-type]
                              "cpu", module=module)
        with runner:
            for i in members:
                runs[i] = {k: np.asarray(v) for k, v in runner.infer(dict(feeds[i])).items()}
    return runs


def _reference_module(loaded: LoadedModel) -> nn.Module:
    module = loaded.reference_module()
    if module is None:  # an ONNX input: no PyTorch model to quantize as the graph does
        raise TargetUnmetError(f"{loaded.path}: the INT8/FP8 verdict runs the PyTorch model "
                               "at the graph's scales; an ONNX model has none")
    return module


def _hookable(loaded: LoadedModel) -> tuple[nn.Module, list[str]]:
    """The module to run with hooks on its submodules: an ExportedProgram unflattened (its
    own module() calls no submodule, so no input hook would fire), else the module."""
    if loaded.exported is None:
        return _reference_module(loaded), []
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # torch's own deprecation chatter on unflattening
            warnings.simplefilter("ignore")
            return torch.export.unflatten(loaded.exported), []
    except Exception as exc:  # noqa: BLE001 - torch raises anything here
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return _reference_module(loaded), [f"the ExportedProgram could not be unflattened "
                                           f"({first}): the reference quantizes weights only"]


def _unquantized_runs(module: nn.Module, graph: onnx.ModelProto, feeds: Feeds, threads: int,
                     unquantized: onnx.ModelProto | None
                     ) -> tuple[list[dict[str, np.ndarray]] | None, list[str]]:
    """The graph's outputs without its Q/DQ (`unquantized`: the fp32 graph it was made from;
    else the graph stripped, stored weights replaced by the module's own), or None and why."""
    if unquantized is None:
        stripped = without_qdq(graph, float_weights(module, read_qdq(graph)))
        if isinstance(stripped, str):
            return None, [f"the GELU form's own error is not measured ({stripped}): the bound "
                          "counts quantization's alone"]
        unquantized = stripped
    return run_graph(unquantized, [deployed_feed(f, unquantized) for f in feeds], threads), []


def judge_qdq(loaded: LoadedModel, graph: onnx.ModelProto, feeds: Feeds, threads: int,
              got: Sequence[Mapping[str, np.ndarray]] | None = None,
              unquantized: onnx.ModelProto | None = None) -> QuantVerdict:
    """`graph` (a Q/DQ graph of `loaded`'s module) judged on `feeds` (as the model takes
    them): against PyTorch at the graph's scales, with SQNR, cosine and top-1 against
    PyTorch in float32, the bound widened by the graph's GELU form's own error (the graph
    without Q/DQ against PyTorch in float32; `unquantized`: that graph, default `graph`
    stripped). Products the reference cannot mirror are named in the notes. `got`: the
    graph's outputs per feed as a device computed them (default: ONNX Runtime's)."""
    outputs = [o.name for o in graph.graph.output]
    module, notes = _hookable(loaded)
    fp32 = _torch_runs(loaded, module, feeds, outputs, threads)
    form, unmeasured = _unquantized_runs(module, graph, feeds, threads, unquantized)
    with fake_quantized(module, read_qdq(graph)) as mirrored:
        reference = _torch_runs(loaded, module, feeds, outputs, threads)
    if got is None:
        got = run_graph(graph, [deployed_feed(f, graph) for f in feeds], threads)
    notes += [f"the reference does not quantize {why}" for why in mirrored.unmirrored] + unmeasured
    return judge(fp32, got, reference, logits_of(graph), notes, form)


@contextmanager
def quantized_reference(loaded: LoadedModel, graph: onnx.ModelProto) -> Iterator[nn.Module]:
    """`loaded`'s module computing as the Q/DQ `graph` does (fake-quant at its scales), with
    hooks on its submodules (an ExportedProgram unflattened): the reference a first
    divergence of a Q/DQ graph is looked for against."""
    module, _ = _hookable(loaded)
    with fake_quantized(module, read_qdq(graph)):
        yield module


def read_qdq_graph(graph: onnx.ModelProto) -> QdqGraph:
    """What a Q/DQ graph quantizes, read back from it (`read_qdq`)."""
    products = read_qdq(graph)
    quantized = sum(1 for p in products if p.weight_scale is not None)
    precision = "fp8" if any(p.precision == "fp8" for p in products) else "int8"
    plan = plan_quantization(graph, precision)  # the float weight products left, GELU tensors
    inits = {i.name for i in graph.graph.initializer}
    float_q = any(n.op_type == "QuantizeLinear" and n.input and n.input[0] in inits
                  for n in graph.graph.node)
    gelu = sum(1 for n in graph.graph.node
               if n.op_type in QDQ_OPS and n.input and n.input[0] in plan.gelu_tensors)
    return QdqGraph(precision, "float_q_dq" if float_q else "quantized_dq", quantized,
                    quantized + plan.weight_products, gelu)


def not_judgeable(loaded: LoadedModel) -> str:
    """Why PyTorch cannot run `loaded` at a graph's scales ('' when it can): an ONNX MODEL has
    no modules; a TorchScript module takes no forward hooks (the inputs' fake-quant)."""
    if loaded.is_onnx:
        return "an ONNX MODEL has no PyTorch modules to run at the graph's scales"
    import torch

    if isinstance(loaded.module, torch.jit.ScriptModule):
        return ("a TorchScript module takes no forward hooks, so PyTorch cannot quantize its "
                "inputs at the graph's scales (save it with torch.export.save to be judged)")
    return ""


def judge_deployed(loaded: LoadedModel, graph: onnx.ModelProto, feeds: Feeds, threads: int,
                   got: Sequence[Mapping[str, np.ndarray]] | None = None) -> QdqJudged:
    """A Q/DQ graph given to verify (`got`: a device's outputs of it) judged at its own
    scales; an ONNX MODEL has no modules to quantize, and is not judged."""
    read = read_qdq_graph(graph)
    why = not_judgeable(loaded)
    if why:
        return QdqJudged(read, len(feeds), None, why)
    if not any(p.module for p in read_qdq(graph)):
        return QdqJudged(read, len(feeds), None, "its quantized products name no module of "
                                                 "MODEL (no node provenance)")
    return QdqJudged(read, len(feeds), judge_qdq(loaded, graph, feeds, threads, got))
