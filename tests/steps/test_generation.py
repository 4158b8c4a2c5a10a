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
