"""ONNX Runtime's offline optimizer silently turns a tanh GELU into an exact (erf) BiasGelu
(docs/onnxruntime.md); `--target ort` here keeps the tanh math (FastGelu; the bias Add left for
ORT's MatMul+Add→Gemm fusion)."""

from __future__ import annotations

import copy

import numpy as np
import onnx

from tests.onnx_graphs import (
    E,
    G,
    feed,
    max_diff,
    op_counts,
    ort_session_ops,
    rewrite,
    run_ort,
)


def _linear_tanh_gelu_linear() -> onnx.ModelProto:
    """MatMul → Add(bias) → Gelu(approximate='tanh') (opset 20) → MatMul."""
    rng = np.random.default_rng(1)
    g = G(opset=20)
    h = g.add(g.op("MatMul", g.input(), g.c(rng.standard_normal((E, E)) * 0.5)),
              g.c(rng.standard_normal(E) * 0.5))
    y = g.op("Gelu", h, approximate="tanh")
    return g.model(g.op("MatMul", y, g.c(rng.standard_normal((E, E)) * 0.5)))


def _ort_offline(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model

    return optimize_model(copy.deepcopy(model), model_type="bert", num_heads=0, hidden_size=0,
                          opt_level=0).model


def test_ort_offline_optimizer_changes_tanh_to_erf_and_we_do_not():
    model = _linear_tanh_gelu_linear()
    inputs = feed(model)
    reference = run_ort(model, inputs)

    theirs = _ort_offline(model)  # what the bar does: tanh Gelu + bias → erf BiasGelu
    assert op_counts(theirs)["com.microsoft.BiasGelu"] == 1
    assert max_diff(run_ort(theirs, inputs), reference) > 1e-4

    ours, sites = rewrite(model, "ort")  # what we do: tanh stays tanh
    ops = op_counts(ours)
    assert ops["com.microsoft.FastGelu"] == 1 and ops["com.microsoft.BiasGelu"] == 0
    assert ops["Add"] == 1  # the bias Add stays: ORT's MatMul+Add→Gemm fusion takes it
    assert "left for ONNX Runtime's MatMul+Add→Gemm fusion" in sites[0].action
    ran = ort_session_ops(ours)
    assert ran["Gemm"] == 1 and ran["com.microsoft.FastGelu"] == 1 and ran["Add"] == 0
    assert [s.kind for s in sites] == ["tanh"] and sites[0].added_max_error == 0.0
    assert max_diff(run_ort(ours, inputs), reference) <= 1e-6


def test_running_orts_optimizer_on_our_output_keeps_tanh():
    """Our FastGelu output is left alone by ORT's offline optimizer (nothing to misfuse)."""
    model = _linear_tanh_gelu_linear()
    ours, _sites = rewrite(model, "ort")
    again = _ort_offline(ours)
    assert op_counts(again)["com.microsoft.FastGelu"] == 1
    inputs = feed(model)
    assert max_diff(run_ort(again, inputs), run_ort(model, inputs)) <= 1e-6
