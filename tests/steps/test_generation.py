"""steps/generation.py: the greedy-decoding check of with-past graphs (its decoding of real
graphs runs in tests/flows/test_export_flow.py's slow row): when the tokens are judged, and
what it says when it cannot decode."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from export_gelu.exporter.loading.load import load_model
from export_gelu.run import Run
from export_gelu.steps.generation import decode_and_compare, judged
from tests.hf_exports import saved_folder
from tests.session_cache import SessionCache


@pytest.fixture(scope="module")
def gpt2(session_cache: SessionCache) -> Path:
    """The tiny GPT-2 folder, saved once per test run (read-only)."""
    return saved_folder(session_cache, "gpt2")


def test_tokens_are_judged_only_for_the_models_own_math() -> None:
    assert judged("keep", "fp32") and judged("keep", "fp64")
    assert not judged("tanh", "fp32") and not judged("keep", "fp16")


def test_decoding_after_the_model_was_freed_says_so(gpt2: Path, tmp_path: Path) -> None:
    loaded = load_model(gpt2)
    assert loaded.task == "text-generation-with-past" and loaded.generation is not None
    loaded.generation = dataclasses.replace(loaded.generation, model=None)
    result = decode_and_compare(loaded, {"decoder_with_past": tmp_path / "never-read.onnx"},
                                loaded, gelu="keep", run_precision="fp32", threads=1, run=Run())
    assert (result.status, result.reason) == ("skipped", "the model was freed")


def test_a_bf16_folder_is_not_decoded_as_parity_is_not_run(gpt2: Path, tmp_path: Path) -> None:
    """ONNX Runtime's CPU kernels lack bf16 ops a T5 needs (Where): bf16 graphs are not run,
    for parity and for decoding alike, with the same reason (was: an internal error, exit 4)."""
    from export_gelu.steps.check import BF16_NOT_RUN

    loaded = load_model(gpt2)
    result = decode_and_compare(loaded, {"decoder_with_past": tmp_path / "never-read.onnx"},
                                loaded, gelu="keep", run_precision="bf16", threads=1, run=Run())
    assert (result.status, result.reason) == ("skipped", BF16_NOT_RUN)


def test_a_graph_onnx_runtime_has_no_kernel_for_is_skipped_with_why(gpt2: Path,
                                                                     tmp_path: Path) -> None:
    """A graph ONNX Runtime cannot load (no CPU kernel for an op at its type) is not decoded:
    skipped, naming the op, as parity says it."""
    import onnx
    from onnx import TensorProto, helper

    bf16 = [helper.make_tensor_value_info(n, TensorProto.BFLOAT16, [1]) for n in "xyz"]
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [1])
    graph = helper.make_graph([helper.make_node("Where", ["c", "x", "y"], ["z"])], "g",
                              [cond, bf16[0], bf16[1]], [bf16[2]])
    path = tmp_path / "where-bf16.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    loaded = load_model(gpt2)
    result = decode_and_compare(loaded, {"decoder_with_past": path}, loaded, gelu="keep",
                                run_precision="fp16", threads=1, run=Run())
    assert result.status == "skipped"
    assert result.reason.startswith("ONNX Runtime (CPU) has no kernel for an op of the written "
                                    "graph: Could not find an implementation for Where(16)")
