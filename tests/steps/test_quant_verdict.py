"""steps/quant_verdict.py: a Q/DQ graph read back and judged against PyTorch at its own scales
(Tiny's INT8 graph for trt8.6, the fixture tiny_int8)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch

from export_gelu.steps.quant_verdict import (
    judge_deployed,
    judge_qdq,
    logits_of,
    not_judgeable,
    quantized_reference,
    read_qdq_graph,
)
from tests.onnx_graphs import run_ort
from tests.steps.step_inputs import TINY_SHAPE, main_feed, source, tiny_module


def test_read_qdq_graph_counts_tinys_one_product(tiny_int8: tuple[Path, Path]) -> None:
    read = read_qdq_graph(onnx.load(str(tiny_int8[1])))
    assert (read.precision, read.quantized, read.weight_products, read.gelu_qdq) == \
        ("int8", 1, 1, 0)


def test_logits_of_names_only_outputs_called_logits(tiny_int8: tuple[Path, Path]) -> None:
    graph = onnx.load(str(tiny_int8[1]))
    assert logits_of(graph) == []
    graph.graph.output[0].name = "logits"
    assert logits_of(graph) == ["logits"]


def test_judge_qdq_passes_the_graph_and_fails_a_wrong_device(tiny_int8: tuple[Path, Path]) -> None:
    program, out = tiny_int8
    graph = onnx.load(str(out))
    feeds = [main_feed(1), main_feed(2)]
    verdict = judge_qdq(source(program).loaded, graph, feeds, 1)
    assert verdict.passed, verdict
    name = graph.graph.output[0].name
    wrong = [{name: np.full(TINY_SHAPE, 0.5, np.float32)} for _ in feeds]
    assert not judge_qdq(source(program).loaded, graph, feeds, 1, got=wrong).passed


def test_judge_deployed_judges_a_program_and_not_an_onnx_model(
        tiny_int8: tuple[Path, Path]) -> None:
    program, out = tiny_int8
    graph = onnx.load(str(out))
    judged = judge_deployed(source(program).loaded, graph, [main_feed(3)], 1)
    assert judged.passed is True and judged.graph.quantized == 1
    onnx_model = judge_deployed(source(out).loaded, graph, [main_feed(3)], 1)
    assert onnx_model.verdict is None and "ONNX MODEL" in onnx_model.not_judged


def test_not_judgeable_says_why_only_for_onnx_and_torchscript(tiny_int8: tuple[Path, Path],
                                                              tmp_path: Path) -> None:
    program, out = tiny_int8
    assert not_judgeable(source(program).loaded) == ""
    assert "ONNX MODEL" in not_judgeable(source(out).loaded)
    scripted = tmp_path / "tiny.ts"
    torch.jit.trace(tiny_module(), torch.randn(*TINY_SHAPE)).save(str(scripted))
    assert "TorchScript" in not_judgeable(source(scripted).loaded)


def test_quantized_reference_computes_at_the_graphs_scales(tiny_int8: tuple[Path, Path]) -> None:
    program, out = tiny_int8
    loaded = source(program).loaded
    feed = main_feed(4)
    x = torch.from_numpy(feed["x"])
    graph = onnx.load(str(out))
    (deployed,) = run_ort(graph, {graph.graph.input[0].name: feed["x"]}, optimize=False)
    with torch.no_grad():
        fp32 = loaded.reference_module()(x).numpy()
        with quantized_reference(loaded, graph) as module:
            fake = module(x).numpy()
    assert fake.shape == fp32.shape
    # closer to the INT8 graph than float PyTorch is: it computes at the graph's scales
    assert np.abs(fake - deployed).max() < np.abs(fp32 - deployed).max() / 10
