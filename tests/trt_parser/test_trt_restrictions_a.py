"""TensorRT parser restrictions, part a: for every row a probe graph built with onnx.helper,
the static verdict for each TensorRT profile in and out of the row's range (no false
refusals), and the CLI either rewriting it (the condition gone, ONNX Runtime outputs of the
graph before and after within 1e-6 relative) or exiting 3 naming op, condition and takers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from export_gelu.parse_check import incompatibilities
from export_gelu.targets import PROFILES, TRT_PROFILES
from export_gelu.trt_parser.restrictions import find_hits
from tests.conftest import run_cli
from tests.onnx_graphs import run_ort

pytest.importorskip("onnxruntime")

TRT = [p.name for p in TRT_PROFILES]


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto] = (),
           opset: int = 11) -> onnx.ModelProto:
    g = h.make_graph(nodes, "probe", inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def vi(name: str, elem: int, shape: list) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, elem, shape)


@dataclass
class Probe:
    """A graph meeting one restriction, the profiles whose parser it hits, and a feed."""

    name: str
    build: Callable[[], onnx.ModelProto]
    condition: str  # the record's condition, as messages spell it
    hit: set[str]  # TRT profile names the condition applies to
    feed: Callable[[], dict[str, np.ndarray]]
    target: str  # the profile the CLI is run for
    gone: Callable[[onnx.ModelProto], bool]  # the condition is absent from the output
    note: str = ""  # words of the report's note on the rewrite (default: 'with <condition>')


rng = np.random.default_rng(0)
X = rng.uniform(0.5, 2.0, (2, 5, 3)).astype(np.float32)


def _ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


# -- the probes ------------------------------------------------------------------------------

def gather_negative_constant() -> onnx.ModelProto:
    idx = nh.from_array(np.array([-1, 0, -5], np.int64), "idx")
    return _model([h.make_node("Gather", ["x", "idx"], ["y"], axis=1, name="g")],
                  [vi("x", T.FLOAT, [2, 5, 3])], [vi("y", T.FLOAT, [2, 3, 3])], [idx])


def gather_negative_symbolic_dim() -> onnx.ModelProto:
    idx = nh.from_array(np.array([-1, 1], np.int64), "idx")
    return _model([h.make_node("Gather", ["x", "idx"], ["y"], axis=1, name="g")],
                  [vi("x", T.FLOAT, [2, "n", 3])], [vi("y", T.FLOAT, [2, 2, 3])], [idx])


def gather_computed_indices() -> onnx.ModelProto:
    return _model([h.make_node("Gather", ["x", "i"], ["y"], axis=-2, name="g")],
                  [vi("x", T.FLOAT, [2, 5, 3]), vi("i", T.INT32, [4])],
                  [vi("y", T.FLOAT, [2, 4, 3])])


def gatherelements_negative() -> onnx.ModelProto:
    return _model([h.make_node("GatherElements", ["x", "i"], ["y"], axis=1, name="ge")],
                  [vi("x", T.FLOAT, [2, 5, 3]), vi("i", T.INT64, [2, 4, 3])],
                  [vi("y", T.FLOAT, [2, 4, 3])])


def gather_bool() -> onnx.ModelProto:
    idx = nh.from_array(np.array([0, 4, 2], np.int64), "idx")
    return _model([h.make_node("Gather", ["b", "idx"], ["y"], axis=1, name="gb")],
                  [vi("b", T.BOOL, [2, 5, 3])], [vi("y", T.BOOL, [2, 3, 3])], [idx])


def double_graph() -> onnx.ModelProto:
    """DOUBLE inside a float graph: a Cast to DOUBLE, a DOUBLE initializer, a Constant (its
    tensor unnamed, as the TorchScript exporter writes it)."""
    w = nh.from_array(rng.uniform(0.5, 2.0, (3,)), "w")
    c = h.make_node("Constant", [], ["c"], value=nh.from_array(np.array(0.25)), name="c")
    nodes = [h.make_node("Cast", ["x"], ["xd"], to=T.DOUBLE, name="to_double"), c,
             h.make_node("Mul", ["xd", "w"], ["m"], name="mul"),
             h.make_node("Add", ["m", "c"], ["a"], name="add"),
             h.make_node("Cast", ["a"], ["y"], to=T.FLOAT, name="to_float")]
    return _model(nodes, [vi("x", T.FLOAT, [2, 5, 3])], [vi("y", T.FLOAT, [2, 5, 3])], [w])


def double_io_graph() -> onnx.ModelProto:
    """DOUBLE graph input and output (the CLI takes no float64 feeds: checked through the API)."""
    w = nh.from_array(rng.uniform(0.5, 2.0, (3,)), "w")
    return _model([h.make_node("Mul", ["d", "w"], ["y"], name="mul")],
                  [vi("d", T.DOUBLE, [2, 5, 3])], [vi("y", T.DOUBLE, [2, 5, 3])], [w])


def double_out_of_range() -> onnx.ModelProto:
    w = nh.from_array(np.array([1e300, 1.0, 2.0]), "w")
    nodes = [h.make_node("Cast", ["x"], ["xd"], to=T.DOUBLE, name="to_double"),
             h.make_node("Mul", ["xd", "w"], ["m"], name="mul"),
             h.make_node("Cast", ["m"], ["y"], to=T.FLOAT, name="to_float")]
    return _model(nodes, [vi("x", T.FLOAT, [2, 5, 3])], [vi("y", T.FLOAT, [2, 5, 3])], [w])


def int64_out_of_range() -> onnx.ModelProto:
    big = nh.from_array(np.array([2 ** 40], np.int64), "big")
    ends = nh.from_array(np.array([np.iinfo(np.int64).max], np.int64), "ends")
    starts = nh.from_array(np.array([1], np.int64), "starts")
    nodes = [h.make_node("Add", ["i", "big"], ["y"], name="add_big"),
             h.make_node("Slice", ["i", "starts", "ends"], ["s"], name="slice")]
    return _model(nodes, [vi("i", T.INT64, [4])], [vi("y", T.INT64, [4]),
                                                   vi("s", T.INT64, [3])], [big, ends, starts])


def castlike() -> onnx.ModelProto:
    like = nh.from_array(np.zeros((1,), np.float16), "like")
    nodes = [h.make_node("CastLike", ["x", "like"], ["c"], name="cl"),
             h.make_node("Relu", ["c"], ["y"], name="relu")]
    return _model(nodes, [vi("x", T.FLOAT, [2, 5, 3])], [vi("y", T.FLOAT16, [2, 5, 3])],
                  [like], opset=15)


def gathernd_bool() -> onnx.ModelProto:
    idx = nh.from_array(np.array([[0, 4], [1, 2]], np.int64), "idx")
    return _model([h.make_node("GatherND", ["b", "idx"], ["y"], name="gnd")],
                  [vi("b", T.BOOL, [2, 5, 3])], [vi("y", T.BOOL, [2, 3])], [idx], opset=13)


def pow_int_exponent() -> onnx.ModelProto:
    e = nh.from_array(np.array(3, np.int64), "e")
    return _model([h.make_node("Pow", ["x", "e"], ["y"], name="pow")],
                  [vi("x", T.FLOAT, [2, 5, 3])], [vi("y", T.FLOAT, [2, 5, 3])], [e], opset=13)


def pow_int_exponent_computed() -> onnx.ModelProto:
    return _model([h.make_node("Pow", ["x", "e"], ["y"], name="pow")],
                  [vi("x", T.FLOAT, [2, 5, 3]), vi("e", T.INT32, [])],
                  [vi("y", T.FLOAT, [2, 5, 3])], opset=13)


def pow_int_base(k: int = 3) -> onnx.ModelProto:
    e = nh.from_array(np.array(k, np.int32), "e")
    return _model([h.make_node("Pow", ["i", "e"], ["y"], name="pow")],
                  [vi("i", T.INT32, [2, 5, 3])], [vi("y", T.INT32, [2, 5, 3])], [e], opset=13)


def layernorm_outputs(used: bool = True) -> onnx.ModelProto:
    scale = nh.from_array(rng.uniform(0.5, 1.5, (3,)).astype(np.float32), "scale")
    bias = nh.from_array(rng.uniform(-0.5, 0.5, (3,)).astype(np.float32), "bias")
    ln = h.make_node("LayerNormalization", ["x", "scale", "bias"],
                     ["y", "mean", "inv"] if used else ["y", "mean_unused", ""],
                     axis=-1, epsilon=1e-5, name="ln")
    outs = [vi("y", T.FLOAT, [2, 5, 3])]
    if used:
        outs += [vi("mean", T.FLOAT, [2, 5, 1]), vi("inv", T.FLOAT, [2, 5, 1])]
    return _model([ln], [vi("x", T.FLOAT, [2, 5, 3])], outs, [scale, bias], opset=17)


def dropout_mask() -> onnx.ModelProto:
    return _model([h.make_node("Dropout", ["x"], ["y", "mask"], name="drop")],
                  [vi("x", T.FLOAT, [2, 5, 3])],
                  [vi("y", T.FLOAT, [2, 5, 3]), vi("mask", T.BOOL, [2, 5, 3])], opset=11)


def _before(version: str) -> set[str]:
    from export_gelu.trt_parser.versions import in_range

    return {p.name for p in TRT_PROFILES if in_range(p.trt_version, None, version)}


def _between(since: str, fixed_in: str | None) -> set[str]:
    from export_gelu.trt_parser.versions import in_range

    return {p.name for p in TRT_PROFILES if in_range(p.trt_version, since, fixed_in)}


def _const_nonneg(m: onnx.ModelProto) -> bool:
    idx = {i.name: nh.to_array(i) for i in m.graph.initializer}
    g = next(n for n in m.graph.node if n.op_type == "Gather" and n.input[0] == "x")
    return g.input[1] in idx and idx[g.input[1]].min() >= 0


def _guarded(m: onnx.ModelProto) -> bool:
    return "Where" in _ops(m) and "Less" in _ops(m)


def _no_double(m: onnx.ModelProto) -> bool:
    g = m.graph
    types = [v.type.tensor_type.elem_type for v in [*g.input, *g.output, *g.value_info]]
    return T.DOUBLE not in types and all(i.data_type != T.DOUBLE for i in g.initializer) and \
        all(a.i != T.DOUBLE for n in g.node for a in n.attribute if a.name == "to")


def _x() -> dict[str, np.ndarray]:
    return {"x": X}



PROBES = [
    Probe("gather-negative-constant", gather_negative_constant, "negative indices",
          _before("8.2"), _x, "trt7.0", _const_nonneg),
    Probe("gather-negative-symbolic", gather_negative_symbolic_dim, "negative indices",
          _before("8.2"), _x, "trt8.0", _guarded),
    Probe("gather-computed-indices", gather_computed_indices, "negative indices",
          _before("8.2"), lambda: {"x": X, "i": np.array([-1, 0, 4, -5], np.int32)},
          "trt7.2", _guarded),
    Probe("gatherelements-negative", gatherelements_negative, "negative indices",
          {"trt8.0"}, lambda: {"x": X, "i": rng.integers(-5, 5, (2, 4, 3)).astype(np.int64)},
          "trt8.0", _guarded),
    Probe("gather-bool", gather_bool, "BOOL data", _between("7.1", "8.5"),
          lambda: {"b": rng.random((2, 5, 3)) > 0.5}, "trt8.4",
          lambda m: [n.op_type for n in m.graph.node] == ["Cast", "Gather", "Cast"]),
    Probe("gathernd-bool", gathernd_bool, "BOOL data", _between("8.2", "8.5"),
          lambda: {"b": rng.random((2, 5, 3)) > 0.5}, "trt8.2",
          lambda m: _ops(m) == ["Cast", "GatherND", "Cast"]),
    Probe("double", double_graph, "element type DOUBLE", _before("8.0"),
          _x, "trt7.1", _no_double, note="DOUBLE tensors converted to FLOAT"),
    Probe("castlike", castlike, "no importer", _before("9.1"), _x, "trt8.6",
          lambda m: "CastLike" not in _ops(m)),
    Probe("pow-int-exponent", pow_int_exponent, "an integer exponent", _between("7.1", "10.8"),
          _x, "trt8.2", lambda m: all(i.data_type == T.FLOAT for i in m.graph.initializer)),
    Probe("pow-int-base", pow_int_base, "an integer base", _between("7.1", "10.12"),
          lambda: {"i": rng.integers(-20, 20, (2, 5, 3)).astype(np.int32)}, "trt10",
          lambda m: _ops(m) == ["Mul", "Mul"]),
    Probe("layernorm-outputs", layernorm_outputs, "its Mean/InvStdDev outputs declared",
          _between("8.6", None), _x, "trt8.6",
          lambda m: all(len(n.output) == 1 for n in m.graph.node
                        if n.op_type == "LayerNormalization")),
    Probe("layernorm-unused-outputs", lambda: layernorm_outputs(used=False),
          "its Mean/InvStdDev outputs declared", _between("8.6", None), _x, "trt10",
          lambda m: _ops(m) == ["LayerNormalization"] and len(m.graph.node[0].output) == 1),
    Probe("dropout-mask", dropout_mask, "a mask output at opset >= 10", _before("8.0"), _x,
          "trt7.0", lambda m: "Dropout" not in _ops(m)),
]


# -- static verdicts -------------------------------------------------------------------------

@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.name)
def test_verdict_per_profile(probe: Probe) -> None:
    """Every profile in the row's range is told about the condition; none outside it is."""
    model = probe.build()
    for name in TRT:
        reasons = incompatibilities(model, PROFILES[name])
        told = any(f"with {probe.condition}" in r for r in reasons)
        assert told == (name in probe.hit), (name, reasons)


def test_non_negative_computed_indices_are_not_flagged() -> None:
    """Indices from ArgMax or gathered from a non-negative constant: no hit anywhere."""
    pos = nh.from_array(np.arange(5, dtype=np.int64).reshape(1, 5), "pos")
    sel = nh.from_array(np.array([[3, 1]], np.int64), "sel")
    nodes = [h.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0, name="argmax"),
             h.make_node("Gather", ["x", "am"], ["y"], axis=1, name="g"),
             # position ids as BERT's exporter writes them: GatherElements of a constant
             h.make_node("GatherElements", ["pos", "sel"], ["pid"], axis=1, name="ge"),
             h.make_node("Gather", ["x", "pid"], ["z"], axis=1, name="g2")]
    model = _model(nodes, [vi("x", T.FLOAT, [2, 5, 3])],
                   [vi("y", T.FLOAT, [2, 2, 3, 3]), vi("z", T.FLOAT, [2, 1, 2, 3])], [pos, sel])
    assert all(not find_hits(model, p.trt_version) for p in TRT_PROFILES)


def test_slice_ends_int64_max_is_not_flagged() -> None:
    """Exporters write Slice ends as INT64_MAX; clamping that to INT32 changes nothing."""
    reasons = incompatibilities(int64_out_of_range(), PROFILES["trt8.6"])
    hits = [r for r in reasons if "outside the INT32 range" in r]
    assert len(hits) == 1 and "'big'" in hits[0] and "'ends'" not in hits[0], reasons


# -- the CLI: rewrite or exit 3 --------------------------------------------------------------

def _cli(tmp_path: Path, model: onnx.ModelProto, target: str, *flags: str):
    src, out = tmp_path / "probe.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    res = run_cli(src, "--target", target, "-o", out, "--iterations", "0", *flags)
    return res, out


def _close(before: list[np.ndarray], after: list[np.ndarray]) -> None:
    for a, b in zip(before, after, strict=True):
        assert a.shape == b.shape
        if a.dtype.kind in "biu":
            np.testing.assert_array_equal(b, a)
        else:
            np.testing.assert_allclose(b.astype(np.float64), a.astype(np.float64),
                                       rtol=1e-6, atol=0)


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.name)
def test_cli_rewrites(tmp_path: Path, probe: Probe) -> None:
    model = probe.build()
    feed = probe.feed()
    np.savez(tmp_path / "feed.npz", **feed)
    res, out = _cli(tmp_path, model, probe.target, "--inputs", str(tmp_path / "feed.npz"))
    assert res.code == 0, res.err + res.out
    fixed = onnx.load(out)
    assert probe.gone(fixed), [(n.op_type, list(n.input), list(n.output)) for n in fixed.graph.node]
    assert not find_hits(fixed, PROFILES[probe.target].trt_version)
    assert (probe.note or f"with {probe.condition}") in res.out  # the note on the rewrite
    after_feed = {k: v.astype(np.float32) if v.dtype == np.float64 else v
                  for k, v in feed.items()}
    _close(run_ort(model, feed, optimize=False), run_ort(fixed, after_feed, optimize=False))


REFUSED = [
    ("double-out-of-range", double_out_of_range, "trt7.0",
     ("tensor 'w' with element type DOUBLE (initializer, values outside float32's normal "
      "range)", "TensorRT 8.0 and newer")),
    ("int64-out-of-range", int64_out_of_range, "trt8.6",
     ("tensor 'big' with INT64 values outside the INT32 range", "TensorRT 9.0 and newer")),
    ("pow-computed-int-exponent", pow_int_exponent_computed, "trt9",
     ("Pow 'pow' with an integer exponent", "TensorRT before 7.1 or from 10.8")),
    ("pow-int-base-large-exponent", lambda: pow_int_base(20), "trt8.6",
     ("Pow 'pow' with an integer base", "TensorRT before 7.1 or from 10.12")),
]


@pytest.mark.parametrize("name,build,target,words", REFUSED, ids=[r[0] for r in REFUSED])
def test_cli_refuses(tmp_path: Path, name: str, build: Callable[[], onnx.ModelProto],
                     target: str, words: tuple[str, ...]) -> None:
    model = build()
    feed = {i.name: np.ones([d.dim_value for d in i.type.tensor_type.shape.dim],
                            h.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
            for i in model.graph.input}
    np.savez(tmp_path / "feed.npz", **feed)
    res, out = _cli(tmp_path, model, target, "--inputs", str(tmp_path / "feed.npz"))
    assert res.code == 3, res.err + res.out
    assert "Traceback" not in res.err
    for w in words:
        assert w in res.err, res.err
    assert not out.exists()


def test_double_graph_input_and_output_become_float() -> None:
    from export_gelu.passes.compat import fit_to_profile

    model = double_io_graph()
    assert any("element type DOUBLE" in r for r in incompatibilities(model, PROFILES["trt7.2"]))
    fixed, notes = fit_to_profile(onnx.load_from_string(model.SerializeToString()),
                                  PROFILES["trt7.2"])
    assert _no_double(fixed)
    assert any("DOUBLE tensors converted to FLOAT" in n and "relative change" in n for n in notes)
    d = rng.uniform(0.5, 2.0, (2, 5, 3))
    _close(run_ort(model, {"d": d}), run_ort(fixed, {"d": d.astype(np.float32)}))


def test_castlike_of_unknown_type_is_refused() -> None:
    """CastLike whose second input has no type shape inference can tell: nothing to Cast to."""
    from export_gelu.errors import TargetUnmetError
    from export_gelu.passes.compat.trt_fixes.apply import fit_restrictions

    nodes = [h.make_node("Mystery", ["x"], ["t"], domain="com.example", name="mystery"),
             h.make_node("CastLike", ["x", "t"], ["y"], name="cl")]
    g = h.make_graph(nodes, "probe", [vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT16, [2])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 15),
                                           h.make_opsetid("com.example", 1)])
    with pytest.raises(TargetUnmetError, match=r"CastLike 'cl' with no importer \(target type "
                                               r"from 't', unknown\).*TensorRT 9.1 and newer"):
        fit_restrictions(model, "8.6", "trt8.6")


def test_castlike_fixed_before_downconversion(tmp_path: Path) -> None:
    """trt8.2 takes opset 13 at most: CastLike (opset 15) becomes Cast before the graph is
    converted down, so the conversion never meets it."""
    res, out = _cli(tmp_path, castlike(), "trt8.2")
    assert res.code == 0, res.err + res.out
    fixed = onnx.load(out)
    assert "CastLike" not in _ops(fixed) and fixed.opset_import[0].version == 13
    _close(run_ort(castlike(), _x()), run_ort(fixed, _x()))


def test_inspect_names_restriction(tmp_path: Path) -> None:
    src = tmp_path / "probe.onnx"
    onnx.save(dropout_mask(), src)
    res = run_cli("inspect", src, "--target", "trt7.0")
    assert res.code == 3
    assert "Dropout 'drop' with a mask output at opset >= 10" in res.out
    res = run_cli("inspect", src, "--target", "trt8.0")
    assert res.code == 0, res.out
