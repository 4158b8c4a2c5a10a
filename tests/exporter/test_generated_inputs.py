"""The input generator (exporter/inputs/generated.py): inputs made by role at any shape.

Token ids stay inside the embedding table the model has (found in an ONNX graph, an
ExportedProgram and a module), attention masks are padding patterns with no row masked whole,
token types are a segment of 0 then 1, positions count up, floats are normal noise; an
explicit `--input` range is used as given. A parity failure on generated inputs says so.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from examples.models import VOCAB, bert_model
from export_gelu.exporter.inputs.generated import (
    MASK,
    POSITIONS,
    TOKEN_IDS,
    TOKEN_TYPES,
    ModelHints,
    generate_inputs,
    module_vocab,
    onnx_vocab,
    program_vocab,
    role,
)
from export_gelu.exporter.inputs.specs import InputSpec
from tests.conftest import run_cli

I64, F32 = np.dtype(np.int64), np.dtype(np.float32)
SHAPES = [(1, 1), (3, 13), (8, 64), (5, 2)]


def _req(name: str, shape: tuple[int, ...], dtype=I64, low=None, high=None) -> InputSpec:
    return InputSpec(name, shape, np.dtype(dtype), low, high)


@pytest.mark.parametrize("name,dtype,want", [
    ("input_ids", I64, TOKEN_IDS), ("decoder_input_ids", I64, TOKEN_IDS),
    ("attention_mask", I64, MASK), ("decoder_attention_mask", np.dtype(bool), MASK),
    ("padding_mask", F32, MASK), ("head_mask", F32, None), ("token_type_ids", I64, TOKEN_TYPES),
    ("position_ids", I64, POSITIONS), ("pixel_values", F32, None), ("x", I64, None),
    ("input_ids", F32, None),
])
def test_roles_come_from_the_name_and_dtype(name, dtype, want):
    assert role(name, np.dtype(dtype)) == want


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.float32])
def test_masks_are_padding_with_something_to_attend_in_every_row(shape, dtype):
    for seed in range(5):
        mask = generate_inputs([_req("attention_mask", shape, dtype)], seed=seed)
        m = mask["attention_mask"].astype(np.int64)
        assert mask["attention_mask"].dtype == np.dtype(dtype)
        assert (m.sum(axis=-1) >= 1).all()  # never a row with nothing to attend to
        assert (m[0] == 1).all()  # the longest row: a batch is padded to it
        assert (np.diff(m, axis=-1) <= 0).all()  # ones, then zeros: a prefix per row
        assert set(np.unique(m)) <= {0, 1}


def test_token_ids_lie_in_the_embedding_table():
    feed = generate_inputs([_req("input_ids", (8, 64))], ModelHints(input_vocab=VOCAB))
    ids = feed["input_ids"]
    assert ids.min() >= 0 and ids.max() < VOCAB and ids.max() >= 10  # not the old [0, 10)
    assert "[0, 1000)" in feed.generated["input_ids"]


def test_a_lone_integer_input_of_a_model_with_a_vocabulary_is_its_token_ids():
    """forward(x) with x the ids (examples/models.py wraps GPT-2 so)."""
    feed = generate_inputs([_req("x", (4, 32))], ModelHints(input_vocab=VOCAB))
    assert feed["x"].max() >= 10 and feed["x"].max() < VOCAB
    assert feed.generated["x"].startswith("token ids")


def test_token_types_are_a_segment_of_0_then_1():
    feed = generate_inputs([_req("token_type_ids", (8, 16))], ModelHints(type_vocab=2))
    t = feed["token_type_ids"]
    assert (t[:, 0] == 0).all() and (t[:, -1] == 1).all()
    assert (np.diff(t, axis=-1) >= 0).all()
    one_type = generate_inputs([_req("token_type_ids", (2, 8))], ModelHints(type_vocab=1))
    assert not one_type["token_type_ids"].any()


def test_positions_count_up_and_floats_are_normal_noise():
    feed = generate_inputs([_req("position_ids", (2, 5)), _req("pixel_values", (64, 3, 32, 32),
                                                                F32)])
    assert feed["position_ids"].tolist() == [[0, 1, 2, 3, 4]] * 2
    px = feed["pixel_values"]
    assert px.dtype == np.float32 and abs(px.mean()) < 0.05 and abs(px.std() - 1) < 0.05


def test_an_explicit_range_is_used_as_given_and_the_same_seed_gives_the_same_arrays():
    reqs = [_req("attention_mask", (4, 8), low=0, high=2), _req("input_ids", (4, 8))]
    a, b = generate_inputs(reqs, ModelHints(input_vocab=VOCAB)), generate_inputs(
        reqs, ModelHints(input_vocab=VOCAB))
    assert all(np.array_equal(a[n], b[n]) for n in a)
    assert a.generated["attention_mask"] == "uniform in [0, 2) (--input range)"


# -- the embedding tables, found in every model format ------------------------------------------

def lookup_graph(path) -> None:
    """input_ids → Cast → Gather(777-row table); token_type_ids → Gather(2-row table)."""
    table = numpy_helper.from_array(np.zeros((777, 4), np.float32), "table")
    types = numpy_helper.from_array(np.ones((2, 4), np.float32), "types")
    nodes = [helper.make_node("Cast", ["input_ids"], ["ids32"], to=TensorProto.INT32),
             helper.make_node("Gather", ["table", "ids32"], ["e"]),
             helper.make_node("Gather", ["types", "token_type_ids"], ["t"]),
             helper.make_node("Add", ["e", "t"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
                     for n in ("input_ids", "token_type_ids")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        [table, types])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_an_onnx_graph_says_which_table_each_input_indexes(tmp_path):
    lookup_graph(tmp_path / "m.onnx")
    assert onnx_vocab(tmp_path / "m.onnx") == {"input_ids": 777, "token_type_ids": 2}


def test_verify_makes_its_inputs_by_role_and_says_so(tmp_path):
    src, rep = tmp_path / "m.onnx", tmp_path / "r.json"
    lookup_graph(src)
    res = run_cli("verify", src, src, "--input", "input_ids:4x16:int64", "--input",
                  "token_type_ids:4x16:int64", "--report", rep, "--iterations", "0")
    assert res.code == 0, res.err + res.out
    report = json.loads(rep.read_text())
    assert report["generated_inputs"] == {
        "input_ids": "token ids, uniform in [0, 777) (the embedding table's rows)",
        "token_type_ids": "segments: 0 then 1 per row"}
    assert report["inputs"] == "generated by role, at the --input shapes"


def test_an_exported_program_and_a_module_say_their_vocabulary():
    model = bert_model()
    assert module_vocab(model) == (VOCAB, 2)
    kwargs = {n: torch.zeros(2, 8, dtype=torch.long)
              for n in ("input_ids", "attention_mask", "token_type_ids")}
    program = torch.export.export(model, (), kwargs, strict=False)
    assert program_vocab(program, list(kwargs)) == {"input_ids": VOCAB, "token_type_ids": 2}


# -- a parity failure on generated inputs says so -----------------------------------------------

def test_a_failure_on_generated_inputs_says_which_and_how(tmp_path):
    """GPT-2 fed random 0/1 masks (an explicit --input range): rows with nothing to attend to
    differ between PyTorch and ONNX Runtime; the report names the generated inputs."""
    from examples.save_model import save

    src = save("gpt2_model", "pickle", tmp_path / "gpt2.pkl")
    rep = tmp_path / "r.json"
    res = run_cli(src, "--allow-pickle", "--target", "onnx", "-o", tmp_path / "o.onnx",
                  "--report", rep, "--iterations", "0", "--input", "input_ids:batchxseq:int64",
                  "--input", "attention_mask:batchxseq:int64:0,2",
                  "--dynamic", "batch=1:4:8", "--dynamic", "seq=8:16:64")
    assert res.code == 1, res.err + res.out
    report = json.loads(rep.read_text())
    assert report["generated_inputs"] == {
        "input_ids": f"token ids, uniform in [0, {VOCAB}) (the embedding table's rows)",
        "attention_mask": "uniform in [0, 2) (--input range)"}
    assert all(s["generated"] == report["generated_inputs"] for s in report["dynamic"]["shapes"])
    assert "inputs generated, not real data (input_ids: token ids" in res.out
    assert "attention_mask: uniform in [0, 2) (--input range)" in res.out
