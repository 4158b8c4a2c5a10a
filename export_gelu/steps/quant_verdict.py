"""The INT8/FP8 verdict on a Q/DQ graph, for export and verify alike: the graph in ONNX Runtime
(as written), PyTorch in float32, and PyTorch at the graph's own scales (fake-quant,
quantize/reference.py) on the same feeds, judged by quantize/judge.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from export_gelu.check.deployed import deployed_feed
from export_gelu.check.reference import model_runner
from export_gelu.exporter.loading.load import LoadedModel
from export_gelu.quantize import QuantVerdict, judge, read_qdq, run_graph
from export_gelu.quantize.reference import fake_quantized

#: What the verdict compares with, in words (the report's `judged_by`).
JUDGED_BY = "PyTorch with the graph's scales (fake-quant of weights and inputs)"

Feeds = Sequence[Mapping[str, np.ndarray]]


def logits_of(model: onnx.ModelProto) -> list[str]:
    """The outputs whose top-1 agreement is counted: those named as logits."""
    return [o.name for o in model.graph.output if "logits" in o.name.lower()]


def _torch_runs(loaded: LoadedModel, module: Any, feeds: Feeds, outputs: list[str],
                threads: int) -> list[dict[str, np.ndarray]]:
    runner = model_runner(loaded, dict(feeds[0]), outputs, threads, "cpu",  # type: ignore[arg-type]
                          module=module)
    with runner:
        return [{k: np.asarray(v) for k, v in runner.infer(dict(f)).items()} for f in feeds]


def _hookable(loaded: LoadedModel) -> tuple[Any, list[str]]:
    """The module to run with hooks on its submodules: an ExportedProgram unflattened (its
    own module() calls no submodule, so no input hook would fire), else the module."""
    if loaded.exported is None:
        return loaded.reference_module(), []
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # torch's own deprecation chatter on unflattening
            warnings.simplefilter("ignore")
            return torch.export.unflatten(loaded.exported), []
    except Exception as exc:  # noqa: BLE001 - torch raises anything here
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return loaded.reference_module(), [f"the ExportedProgram could not be unflattened "
                                           f"({first}): the reference quantizes weights only"]


def judge_qdq(loaded: LoadedModel, graph: onnx.ModelProto, feeds: Feeds, threads: int
              ) -> QuantVerdict:
    """`graph` (a Q/DQ graph of `loaded`'s module) judged on `feeds` (as the model takes
    them): against PyTorch at the graph's scales, with SQNR, cosine and top-1 against
    PyTorch in float32. Products the reference cannot mirror are named in the notes."""
    outputs = [o.name for o in graph.graph.output]
    module, notes = _hookable(loaded)
    fp32 = _torch_runs(loaded, module, feeds, outputs, threads)
    with fake_quantized(module, read_qdq(graph)) as mirrored:
        reference = _torch_runs(loaded, module, feeds, outputs, threads)
    got = run_graph(graph, [deployed_feed(f, graph) for f in feeds], threads)
    notes += [f"the reference does not quantize {why}" for why in mirrored.unmirrored]
    return judge(fp32, got, reference, logits_of(graph), notes)
