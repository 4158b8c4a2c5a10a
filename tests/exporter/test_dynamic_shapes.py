"""Dynamic shapes end to end: one export serves every batch and sequence length.

BERT (two inputs sharing batch and seq) and GPT-2 from examples/models.py, as ExportedProgram
(saved dynamic, and static), pickled nn.Module, TorchScript and ONNX, exported for onnx, ort,
trt8.2, trt8.6 and trt10. Each output's inputs and outputs carry the dims named batch/seq,
ONNX Runtime runs it at three shapes matching eager PyTorch, and no Reshape/Expand shape
constant holds the size the model was captured at. Bad ranges exit 2 with the reason.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from examples.models import VOCAB, bert, gpt2
from tests.conftest import note_messages, run_cli

#: Capture sizes no model dim equals (hidden 64, heads 4, head dim 16, MLP 256, positions 64).
BATCH, SEQ = 3, 13
#: Shapes ORT runs every output at: MIN-ish, odd, and the examples' 64 positions.
SHAPES = [(1, 16), (3, 37), (8, 64)]
RANGES = ("--dynamic", "batch=1:3:8", "--dynamic", "seq=8:13:64")


class BertWithMask(torch.nn.Module):
    """BERT taking input_ids and attention_mask: two inputs that share batch and seq."""

    def __init__(self) -> None:
        super().__init__()
        self.model = bert().model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _ids(batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).integers(0, VOCAB, (batch, seq)))


def _mask(batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    m = np.random.default_rng(seed + 1).integers(0, 2, (batch, seq))
    m[:, 0] = 1
    return torch.from_numpy(m)


@pytest.fixture(scope="session")
def dyn_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dynamic")


def _save(kind: str, path: Path) -> None:
    """Write the model file `kind` (see `saved`) at `path`."""
    b, s = torch.export.Dim("b", min=1, max=8), torch.export.Dim("s", min=1, max=64)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if kind == "bert2-ep-dynamic":
            ep = torch.export.export(BertWithMask().eval(), (_ids(BATCH, SEQ), _mask(BATCH, SEQ)),
                                     dynamic_shapes=({0: b, 1: s}, {0: b, 1: s}), strict=False)
            torch.export.save(ep, str(path))
        elif kind == "gpt2-ep-dynamic":
            ep = torch.export.export(gpt2(), (_ids(BATCH, SEQ),),
                                     dynamic_shapes=({0: b, 1: s},), strict=False)
            torch.export.save(ep, str(path))
        elif kind == "gpt2-ep-static":
            torch.export.save(torch.export.export(gpt2(), (_ids(BATCH, SEQ),), strict=False),
                              str(path))
        elif kind == "bert-pickle":
            torch.save(bert(), str(path))
        elif kind == "gpt2-torchscript":
            torch.jit.save(torch.jit.trace(gpt2(), (_ids(BATCH, SEQ),), check_trace=False),
                           str(path))
        else:
            names = {"bert-onnx": ("N", "L"), "gpt2-onnx": ("batch", "seq")}[kind]
            model = bert() if kind.startswith("bert") else gpt2()
            torch.onnx.export(model, (_ids(BATCH, SEQ),), str(path), dynamo=False,
                              opset_version=17, input_names=["input_ids"],
                              dynamic_axes={"input_ids": dict(enumerate(names))})


@pytest.fixture(scope="session")
def saved(dyn_dir: Path, session_cache):
    """saved(kind) → a model file: bert2-ep-dynamic, gpt2-ep-dynamic, gpt2-ep-static,
    bert-pickle, gpt2-torchscript, bert-onnx (dims N, L), gpt2-onnx (dims batch, seq). Built
    once for every worker and session (session_cache), copied into this session's folder."""
    cache: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in cache:
            name = f"{kind}.{'onnx' if kind.endswith('onnx') else 'pt'}"
            built = session_cache.file(f"dynamic-shapes-{name}", lambda path: _save(kind, path))
            cache[kind] = Path(shutil.copyfile(built, dyn_dir / name))
        return cache[kind]

    return get


def _dims(vi: onnx.ValueInfoProto) -> list:
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def baked_sizes(model: onnx.ModelProto, sizes: set[int]) -> list[str]:
    """Reshape/Expand nodes whose shape is a constant holding one of `sizes`."""
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return [f"{n.op_type} {n.name}: {consts[n.input[1]].tolist()}" for n in model.graph.node
            if n.op_type in ("Reshape", "Expand") and n.input[1] in consts
            and sizes & {int(v) for v in np.asarray(consts[n.input[1]]).reshape(-1)}]


def check_output(path: Path, reference: torch.nn.Module, two_inputs: bool = False,
                 runs_in_ort: bool = True) -> dict:
    """The output's dims are named batch/seq, ORT matches PyTorch at SHAPES, nothing baked."""
    model = onnx.load(str(path))
    inputs = [i for i in model.graph.input]
    for vi in inputs:
        assert _dims(vi) == ["batch", "seq"], (vi.name, _dims(vi))
    for vi in model.graph.output:
        assert _dims(vi)[:2] == ["batch", "seq"], (vi.name, _dims(vi))
    assert baked_sizes(model, {BATCH, SEQ}) == []
    errors = {}
    if not runs_in_ort:
        return errors
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch, seq in SHAPES:
        args = (_ids(batch, seq, seed=batch), _mask(batch, seq, seed=batch))[:1 + two_inputs]
        with torch.no_grad():
            want = reference(*args).numpy()
        feed = {vi.name: a.numpy() for vi, a in zip(inputs, args)}
        got = sess.run(None, feed)[0]
        assert got.shape == want.shape
        errors[(batch, seq)] = float(np.abs(got - want).max() / np.abs(want).max())
        assert errors[(batch, seq)] <= 1e-4, (batch, seq, errors)
    return errors


def _export(src: Path, out: Path, target: str, *flags: str) -> dict:
    rep = out.with_suffix(".json")
    res = run_cli(src, "--target", target, "-o", out, "--report", rep, "--iterations", "0",
                  *flags)
    assert res.code == 0, res.err + res.out
    return json.loads(rep.read_text())


def _check_report(report: dict, dims: dict[str, tuple[int, int, int]]) -> None:
    """The report lists each dim with its range, and parity passed at each shape."""
    assert {d["name"]: (d["min"], d["opt"], d["max"]) for d in report["dynamic"]["dims"]} == dims
    shapes = report["dynamic"]["shapes"]
    assert [s["label"] for s in shapes] == ["opt", "min", "odd", "max"]
    for s in shapes:
        assert s["onnxruntime"]["status"] == "passed", s
    odd = next(s for s in shapes if s["label"] == "odd")["sizes"]
    assert all(v % 2 == 1 for v in odd.values())


# -- every format, every target: one export serves every shape -------------------------------

def test_dynamic_exported_program_stays_dynamic_on_trt82_without_flags(saved, tmp_path):
    """Saved dynamic, no --dynamic: both inputs share one batch and one seq dim."""
    out = tmp_path / "o.onnx"
    report = _export(saved("bert2-ep-dynamic"), out, "trt8.2")
    assert onnx.load(str(out)).opset_import[0].version == 13
    check_output(out, BertWithMask().eval(), two_inputs=True)
    _check_report(report, {"batch": (1, BATCH, 8), "seq": (1, SEQ, 64)})


def test_dynamic_exported_program_with_narrower_ranges_on_trt10(saved, tmp_path):
    out = tmp_path / "o.onnx"
    report = _export(saved("gpt2-ep-dynamic"), out, "trt10", *RANGES)
    check_output(out, gpt2())
    _check_report(report, {"batch": (1, 3, 8), "seq": (8, 13, 64)})


def test_pickled_module_with_dims_named_in_input_on_ort(saved, tmp_path):
    out = tmp_path / "o.onnx"
    report = _export(saved("bert-pickle"), out, "ort", "--allow-pickle",
                     "--input", f"input_ids:batchxseq:int64:0,{VOCAB}", *RANGES)
    check_output(out, bert())
    _check_report(report, {"batch": (1, 3, 8), "seq": (8, 13, 64)})
    assert report["dynamic"]["profile"] == [  # what the TensorRT profile and trtexec take
        {"name": "input_ids", "axis": 0, "min": 1, "opt": 3, "max": 8, "dim": "batch"},
        {"name": "input_ids", "axis": 1, "min": 8, "opt": 13, "max": 64, "dim": "seq"}]


def test_torchscript_is_retraced_with_dynamic_axes_on_trt86(saved, tmp_path):
    out = tmp_path / "o.onnx"
    report = _export(saved("gpt2-torchscript"), out, "trt8.6",
                     "--input", f"x:batchxseq:int64:0,{VOCAB}", *RANGES)
    model = onnx.load(str(out))
    assert [i.name for i in model.graph.input] == ["x"]
    check_output(out, gpt2())
    _check_report(report, {"batch": (1, 3, 8), "seq": (8, 13, 64)})


def test_onnx_input_with_dims_named_by_the_graph(saved, tmp_path):
    """gpt2-onnx names its dims batch/seq: `--dynamic batch=…` needs no --input."""
    out = tmp_path / "o.onnx"
    report = _export(saved("gpt2-onnx"), out, "onnx", *RANGES)
    check_output(out, gpt2())
    _check_report(report, {"batch": (1, 3, 8), "seq": (8, 13, 64)})


@pytest.mark.parametrize("target", ["trt8.2", "trt10"])
def test_onnx_input_axes_mapped_onto_named_dims(saved, target, tmp_path):
    """bert-onnx calls its dims N and L: the axis-map form renames them batch and seq."""
    out = tmp_path / "o.onnx"
    report = _export(saved("bert-onnx"), out, target,
                     "--dynamic", "batch=input_ids:0=1:3:8", "--dynamic", "seq=input_ids:1=8:13:64")
    check_output(out, bert())
    _check_report(report, {"batch": (1, 3, 8), "seq": (8, 13, 64)})


def test_unranged_symbolic_onnx_dims_are_fed_at_one_with_a_note(saved, tmp_path):
    out = tmp_path / "o.onnx"
    report = _export(saved("gpt2-onnx"), out, "onnx", "--dynamic", "batch=1:3:8")
    assert report["parity"]["status"] == "passed"
    assert any("input_ids:1 (seq)" in n and "fed at 1" in n for n in note_messages(report))
    assert {d["name"] for d in report["dynamic"]["dims"]} == {"batch"}


def test_the_tensorrt_profile_comes_from_the_same_ranges(saved):
    """One DynamicAxis per input axis (what the engine profile and trtexec shapes read)."""
    from export_gelu.check.runners.trt_runner import DynamicAxis
    from export_gelu.exporter.feeds.dynamic import plan_dynamic
    from export_gelu.exporter.loading.load import load_model
    from export_gelu.flags.dynamic import parse_dynamic_flag

    loaded = load_model(saved("bert2-ep-dynamic"))
    plan, _specs = plan_dynamic(loaded, [parse_dynamic_flag("batch=1:4:8")], [])
    assert sorted(plan.axes(), key=lambda a: (a.dim, a.name)) == [
        DynamicAxis("attention_mask", 0, 1, 4, 8, "batch"),
        DynamicAxis("input_ids", 0, 1, 4, 8, "batch"),
        DynamicAxis("attention_mask", 1, 1, SEQ, 64, "seq"),
        DynamicAxis("input_ids", 1, 1, SEQ, 64, "seq")]


# -- bad ranges: exit 2 with the reason, nothing written ---------------------------------------

@pytest.mark.parametrize("kind,flags,message", [
    ("gpt2-onnx", ["--dynamic", "batch=4:2:8"], "need 0 < MIN <= OPT <= MAX"),
    ("gpt2-onnx", ["--dynamic", "beam=1:2:4"],
     "no input axis carries a dim named 'beam'; the graph's input dims are named: batch, seq"),
    ("gpt2-onnx", ["--dynamic", "width=input_ids:2=1:2:4"], "has rank 2, no axis 2"),
    ("bert-pickle", ["--allow-pickle", "--input", f"x:2x16:int64:0,{VOCAB}", "--dynamic",
                     "batch=1:2:8"], "name it in --input (e.g. input_ids:batchxseq:int64)"),
    ("bert-pickle", ["--allow-pickle", "--input", f"x:batchxseq:int64:0,{VOCAB}", "--dynamic",
                     "batch=1:2:8"],
     "or names dim(s) seq that no --dynamic ranges (add --dynamic seq=MIN:OPT:MAX)"),
    ("gpt2-ep-static", ["--dynamic", "batch=1:2:8"],
     "is an ExportedProgram saved with static shapes"),
    ("gpt2-ep-dynamic", ["--dynamic", "seq=1:16:128"], "was exported with seq in [1, 64]"),
])
def test_bad_ranges_exit_2(saved, kind, flags, message, tmp_path):
    out = tmp_path / "o.onnx"
    res = run_cli(saved(kind), "--target", "onnx", "-o", out, "--iterations", "0", *flags)
    assert res.code == 2, res.err + res.out
    assert message in res.err
    assert len(res.err.strip().splitlines()) == 1
    assert not out.exists()


def test_static_onnx_axis_cannot_be_ranged(tmp_path):
    from tests.check.test_trt import dynamic_batch_model

    src = tmp_path / "dyn.onnx"
    dynamic_batch_model(src)
    res = run_cli(src, "--target", "onnx", "--dynamic", "x:1=8:16:32", "-o", tmp_path / "o.onnx")
    assert res.code == 2
    assert "axis 1 of 'x' is static (16) in the graph" in res.err


def test_the_sequence_limit_is_named_in_one_line(saved, tmp_path):
    """BERT's 64 position embeddings: torch's constraint violation, reduced to one line."""
    res = run_cli(saved("bert-pickle"), "--allow-pickle", "--target", "onnx",
                  "--input", f"x:batchxseq:int64:0,{VOCAB}", "--dynamic", "batch=1:2:8",
                  "--dynamic", "seq=8:16:128", "-o", tmp_path / "o.onnx")
    assert res.code == 2
    assert "the model does not allow this range" in res.err
    assert "<= 64" in res.err and "Dim('seq'" in res.err
    assert len(res.err.strip().splitlines()) == 1


def test_the_baked_size_check_finds_a_static_reshape():
    """The check above can fail: a Reshape to the capture size is found, a symbolic one not."""
    from onnx import TensorProto, helper

    shape = numpy_helper.from_array(np.array([BATCH, SEQ, 64], np.int64), "shape")
    loose = numpy_helper.from_array(np.array([-1, 64], np.int64), "loose")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="baked"),
             helper.make_node("Reshape", ["y", "loose"], ["z"], name="symbolic")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [shape, loose])
    model = helper.make_model(graph)
    assert baked_sizes(model, {BATCH, SEQ}) == ["Reshape baked: [3, 13, 64]"]


# -- the down-converter on what a dynamic export holds -----------------------------------------

def test_reshape_allowzero_with_a_shape_built_from_sizes_comes_down():
    """Dynamo's dynamic Reshape: shape = Concat(Shape(x)[0:2], [4, -1]), allowzero=1."""
    from onnx import helper

    from tests.passes.test_downconvert import assert_same_after, one_node_model

    x = np.random.default_rng(0).standard_normal((3, 5, 8)).astype(np.float32)
    extra = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "two"], ["bs"]),
             helper.make_node("Concat", ["bs", "tail"], ["shape"], axis=0)]
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1)
    inits = {"zero": np.array([0], np.int64), "two": np.array([2], np.int64),
             "tail": np.array([4, -1], np.int64)}
    assert_same_after(one_node_model(node, {"x": x}, 14, inits=inits, extra=extra), {"x": x}, 13)


def test_reshape_allowzero_with_a_size_reshaped_into_the_shape_comes_down():
    """Rotary/GQA decoders (Llama, Gemma, Bloom with past): a size is reshaped to 1-D before
    the Concat that makes the shape; a Reshape passes its values through."""
    from onnx import helper

    from tests.passes.test_downconvert import assert_same_after, one_node_model

    x = np.random.default_rng(0).standard_normal((3, 5, 8)).astype(np.float32)
    extra = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"]),
             helper.make_node("Reshape", ["b", "one"], ["b1"]),
             helper.make_node("Concat", ["b1", "tail"], ["shape"], axis=0)]
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1)
    inits = {"zero": np.array(0, np.int64), "one": np.array([1], np.int64),
             "tail": np.array([5, -1], np.int64)}
    assert_same_after(one_node_model(node, {"x": x}, 14, inits=inits, extra=extra), {"x": x}, 13)


def test_reshape_allowzero_with_a_shape_that_may_hold_zero_is_refused():
    from onnx import helper

    from export_gelu.errors import TargetUnmetError
    from export_gelu.passes.compat.opset.downconvert import downconvert
    from tests.passes.test_downconvert import one_node_model

    x = np.zeros((3, 5), np.float32)
    extra = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Sub", ["s", "s"], ["shape"])]  # [0, 0]: a size minus itself
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1)
    with pytest.raises(TargetUnmetError, match="allowzero=1 with a shape that may hold 0"):
        downconvert(one_node_model(node, {"x": x}, 14, extra=extra), 13)


@pytest.mark.parametrize("op", ["GreaterOrEqual", "LessOrEqual"])
def test_integer_or_equal_comparisons_come_down_to_opset_11(op):
    from onnx import helper

    from tests.passes.test_downconvert import assert_same_after, one_node_model, ops

    a = np.array([[0, 1, 2, 3]], np.int64)
    b = np.array([[1], [2]], np.int64)
    model = one_node_model(helper.make_node(op, ["a", "b"], ["y"]), {"a": a, "b": b}, 16)
    conv = assert_same_after(model, {"a": a, "b": b}, 11)
    assert ops(conv)[op] == 0 and ops(conv)["Not"] == 1


def test_float_or_equal_comparisons_are_refused_below_12():
    from onnx import helper

    from export_gelu.errors import TargetUnmetError
    from export_gelu.passes.compat.opset.downconvert import downconvert
    from tests.passes.test_downconvert import one_node_model

    a = np.array([0.0, np.nan], np.float32)
    model = one_node_model(helper.make_node("GreaterOrEqual", ["a", "a"], ["y"]), {"a": a}, 16)
    with pytest.raises(TargetUnmetError, match="differs on NaN"):
        downconvert(model, 11)


def test_an_image_size_torch_keeps_static_is_noted_in_its_reason_not_its_advice():
    """A model that takes only even sizes (an SD UNet's down/up-sampling; here a 2×2 pool by
    reshape): torch.export refuses symbolic height/width and the size stays static. The note
    quoted torch's header and advice ("Constraints violated (height, width)! For more
    information, run with TORCH_LOGS=…"); it now quotes the guard that failed."""
    from collections import OrderedDict

    from export_gelu.exporter.hf import sizes

    class EvenOnly(torch.nn.Module):
        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            b, c, h, w = pixel_values.shape
            return pixel_values.reshape(b, c, h // 2, 2, w // 2, 2).sum((3, 5))

    inputs = OrderedDict(pixel_values=torch.randn(2, 3, 8, 8))
    why, _, _ = sizes._captures(EvenOnly(), inputs, "pixel_values", {2: "height", 3: "width"},
                                low=4, high=16, batch=(1, 8))
    assert why.startswith("torch.export cannot keep it symbolic (UserError: ")
    assert "height" in why and "guard" in why, why
    assert "TORCH_LOGS" not in why and "Constraints violated" not in why
