"""TensorRT parser restrictions, part two (docs/tensorrt-restrictions.md): inputs the parser
needs as constants, opset-18 Reduce axes, Trilu rank, Einsum equations, Pad, Resize,
ScatterND, TopK, If and Loop.

For every row a hand-built probe graph: the record's verdict on every TensorRT profile (in
range and out of it), then `export-gelu probe.onnx --target trtX` either rewrites it (the
condition gone, ONNX Runtime outputs before and after within 1e-6 relative) or exits 3
naming the op, the condition and the versions that take it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_gelu.errors import TargetUnmetError
from export_gelu.parse_check import incompatibilities
from export_gelu.targets import PROFILES, TRT_PROFILES
from export_gelu.trt_parser import restriction_rows  # noqa: F401 - registers the records
from export_gelu.trt_parser.restrictions import RESTRICTIONS, find_hits
from tests.conftest import run_cli

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
NAMES = [p.name for p in TRT_PROFILES]


def span(first: str, last: str) -> set[str]:
    """The TensorRT profiles from `first` through `last`, written out."""
    return set(NAMES[NAMES.index(first):NAMES.index(last) + 1])


class B:
    """A probe graph builder: inputs with shapes (str dims are symbolic), initializers,
    `Constant`-free nodes; output types come from shape inference."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.n = 0

    def input(self, name: str, shape: list, dtype: int = F) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, dtype, shape))
        return name

    def c(self, value: object, dtype: object = np.int64) -> str:
        self.n += 1
        name = f"c{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op: str, *inputs: str, n_out: int = 1, **attrs: object) -> str | list[str]:
        self.n += 1
        outs = [f"{op.lower()}{self.n}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=f"{op}_{self.n}",
                                           **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, *outputs: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "probe", self.inputs, [], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True,
                                                     data_prop=True).graph
        typed = {vi.name: vi for vi in inferred.value_info}
        model.graph.output.extend(typed[o] for o in outputs)
        for vi in model.graph.output:
            if not vi.type.tensor_type.HasField("shape"):  # data-dependent: rank from a run
                rank = run(model, feed(model))[list(outputs).index(vi.name)].ndim
                dims = [f"{vi.name}_{i}" for i in range(rank)]
                vi.CopyFrom(helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type,
                                                          dims))
        onnx.checker.check_model(model)
        return model


# -- probes ---------------------------------------------------------------------------------

def slice_axes_folded() -> onnx.ModelProto:
    b = B(13)
    x = b.input("x", [2, 4, 16])
    axes = b.op("Add", b.c([1]), b.c([1]))
    return b.model(b.op("Slice", x, b.c([0]), b.c([8]), axes))


def _batch_zero(b: B, x: str) -> str:
    """[0], computed from the symbolic batch dim: constant in value, not provably so."""
    batch = b.op("Gather", b.op("Shape", x), b.c([0]))
    return b.op("Sub", batch, batch)


def slice_axes_dynamic() -> onnx.ModelProto:
    b = B(13)
    x = b.input("x", ["batch", 4, 16])
    return b.model(b.op("Slice", x, b.c([0]), b.c([1]), _batch_zero(b, x)))


def squeeze_axes_static_shape() -> onnx.ModelProto:
    b = B(13)
    x = b.input("x", [2, 1, 16])
    axes = b.op("Gather", b.op("Shape", x), b.c([1]))  # [1]: the dim's own size
    return b.model(b.op("Squeeze", x, axes))


def unsqueeze_axes_static_dim() -> onnx.ModelProto:
    b = B(13)
    x = b.input("x", ["batch", 4, 16])
    axes = b.op("Sub", b.op("Gather", b.op("Shape", x), b.c([1])), b.c([4]))
    return b.model(b.op("Unsqueeze", x, axes))


def split_sizes() -> onnx.ModelProto:
    b = B(13)
    x = b.input("x", [2, 4, 16])
    a, c = b.op("Split", x, b.op("Add", b.c([4, 2]), b.c([4, 6])), n_out=2, axis=2)
    return b.model(a, c)


def clip_bounds() -> onnx.ModelProto:
    b = B(13)
    x = b.input("x", [2, 4, 16])
    return b.model(b.op("Clip", x, b.op("Neg", b.c(1.0, np.float32)), b.c(1.5, np.float32)))


def range_float() -> onnx.ModelProto:
    b = B(11)
    x = b.input("x", [2, 4, 16])
    start = b.op("Add", b.c(0.5, np.float32), b.c(-0.5, np.float32))
    r = b.op("Range", start, b.c(16.0, np.float32), b.c(1.0, np.float32))
    return b.model(b.op("Add", x, r))


def topk_k(k: object = None, width: int = 16) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        b = B(11)
        x = b.input("x", [2, 4, width])
        kk = b.op("Add", b.c([2]), b.c([1])) if k is None else b.c([k])
        v, i = b.op("TopK", x, kk, n_out=2)
        return b.model(v, i)

    return build


def reducesum_axes() -> onnx.ModelProto:
    b = B(13)
    x = b.input("x", [2, 4, 16])
    return b.model(b.op("ReduceSum", x, b.op("Add", b.c([1]), b.c([1])), keepdims=0))


def reduce18(op: str, axes: list[int], keepdims: int = 1) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        b = B(18)
        x = b.input("x", [2, 4, 16])
        return b.model(b.op(op, x, b.c(axes), keepdims=keepdims))

    return build


def reducemean_axes_dynamic() -> onnx.ModelProto:
    b = B(18)
    x = b.input("x", ["batch", 4, 16])
    return b.model(b.op("ReduceMean", x, _batch_zero(b, x)))


def trilu(shape: list) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        b = B(14)
        x = b.input("x", shape)
        return b.model(b.op("Trilu", x, b.c(1), upper=0))

    return build


def einsum(equation: str, *shapes: list) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        b = B(12)
        names = [b.input(f"x{i}", s) for i, s in enumerate(shapes)]
        return b.model(b.op("Einsum", *names, equation=equation))

    return build


def pad(pads: list[int], mode: str = "constant", computed: bool = False
        ) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        b = B(11)
        x = b.input("x", [2, 4, 16])
        p = b.op("Add", b.c(pads), b.c([0] * len(pads))) if computed else b.c(pads)
        return b.model(b.op("Pad", x, p, mode=mode))

    return build


def pad_axes() -> onnx.ModelProto:
    b = B(18)
    x = b.input("x", [2, 4, 16])
    return b.model(b.op("Pad", x, b.c([1, 2]), b.c(0.5, np.float32), b.c([-1])))


def resize_half_pixel() -> onnx.ModelProto:
    b = B(11)
    x = b.input("x", [1, 1, 4, 4])
    scales = b.c([1.0, 1.0, 2.0, 2.0], np.float32)
    return b.model(b.op("Resize", x, b.c([], np.float32), scales, mode="nearest"))


def scatternd(reduction: str) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        b = B(16)
        x = b.input("x", [4, 16])
        u = b.input("u", [2, 16])
        return b.model(b.op("ScatterND", x, b.c([[1], [1]]), u, reduction=reduction))

    return build


def if_ranks() -> onnx.ModelProto:
    b = B(13)
    b.input("x", [2, 4, 16])  # read by both branches
    cond = b.input("cond", [], BOOL)
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [2, 4, 16])])
    else_g = helper.make_graph([helper.make_node("ReduceMax", ["x"], ["m"], axes=[0],
                                                 keepdims=0)], "else", [],
                               [helper.make_tensor_value_info("m", F, [4, 16])])
    return b.model(b.op("If", cond, then_branch=then_g, else_branch=else_g))


def loop_early_exit() -> onnx.ModelProto:
    b = B(13)
    b.input("x", [4])  # read by the body
    body = helper.make_graph(
        [helper.make_node("Less", ["i", "three"], ["go"]),
         helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Add", ["x", "fi"], ["s"])],
        "body", [helper.make_tensor_value_info("i", I64, []),
                 helper.make_tensor_value_info("c", BOOL, [])],
        [helper.make_tensor_value_info("go", BOOL, []),
         helper.make_tensor_value_info("s", F, [4])],
        [numpy_helper.from_array(np.array(3, np.int64), "three")])
    return b.model(b.op("Loop", b.c(10), b.c(True, np.bool_), body=body))


@dataclass(frozen=True)
class Row:
    key: str
    build: Callable[[], onnx.ModelProto]
    hit_on: set[str]  # the profiles whose parser has the restriction (the parser's verdict)
    target: str  # the profile the export is run for
    fixed: bool  # rewritten (True) or refused with exit 3 (False)
    takers: str = ""  # for refusals: the versions the message names
    id: str = ""
    also: set[str] = field(default_factory=set)  # other keys the probe may hit


ROWS = [
    Row("slice-axes-computed", slice_axes_folded, span("trt7.0", "trt10"), "trt8.2", True),
    Row("slice-axes-computed", slice_axes_dynamic, span("trt7.0", "trt10"), "trt10", False,
        "TensorRT 10.3 and newer", id="slice-dynamic"),
    Row("squeeze-axes-computed", squeeze_axes_static_shape, span("trt7.0", "trt10"),
        "trt10", True),
    Row("unsqueeze-axes-computed", unsqueeze_axes_static_dim, span("trt7.0", "trt10"),
        "trt8.6", True),
    Row("split-sizes-computed", split_sizes, span("trt7.0", "trt8.0"), "trt8.0", True),
    Row("clip-bounds-computed", clip_bounds, span("trt7.0", "trt8.0"), "trt8.0", True),
    Row("range-float-computed", range_float, span("trt7.0", "trt8.2"), "trt8.2", True),
    Row("topk-k-computed", topk_k(), span("trt7.0", "trt8.5"), "trt8.5", True),
    Row("topk-k-too-large", topk_k(3841, 3900), set(NAMES), "trt10", False,
        "no TensorRT version"),
    Row("reducesum-axes-computed", reducesum_axes, set(NAMES), "trt8.2", True),
    Row("reducemean-axes-ignored", reduce18("ReduceMean", [2]), span("trt7.0", "trt9"),
        "trt9", True),
    Row("reducemax-axes-ignored", reduce18("ReduceMax", [0, 2], 0), span("trt7.0", "trt9"),
        "trt9", True),
    Row("reducemean-axes-computed", reducemean_axes_dynamic, set(NAMES), "trt10", False,
        "no TensorRT version"),
    Row("trilu-rank", trilu([2, 2, 4, 4]), {"trt8.5"}, "trt8.5", True),
    Row("trilu-rank", trilu(["batch", 2, 4, 4]), {"trt8.5"}, "trt8.5", True,
        id="trilu-symbolic"),
    Row("einsum-ellipsis", einsum("...ij,...jk->...ik", [2, 3, 4, 5], [2, 3, 5, 6]),
        span("trt7.0", "trt8.6"), "trt8.2", True),
    Row("einsum-ellipsis", einsum("...ij,...jk", [3, 4, 5], [3, 5, 6]),
        span("trt7.0", "trt8.6"), "trt8.4", True, id="einsum-implicit"),
    Row("einsum-diagonal", einsum("bii->bi", [2, 4, 4]), span("trt7.0", "trt10"), "trt10",
        False, "TensorRT 10.12 and newer"),
    Row("einsum-broadcast", einsum("bij,bjk->bik", [1, 4, 5], [2, 5, 6]),
        span("trt7.0", "trt10"), "trt8.6", False, "TensorRT 10.12 and newer"),
    Row("einsum-inputs", einsum("ij,jk,kl->il", [2, 3], [3, 4], [4, 5]),
        span("trt7.0", "trt8.6"), "trt8.2", False, "TensorRT 9.0 and newer"),
    Row("pad-nonzero", pad([0, 0, 1, 0, 0, 1], "reflect"), span("trt7.0", "trt8.0"),
        "trt8.0", False, "TensorRT 8.2 and newer", also={"pad-trt7.0"}),
    Row("pad-outer-dims", pad([1, 0, 0, 0, 0, 0]), span("trt7.0", "trt7.2"), "trt7.1",
        False, "TensorRT 8.0 and newer", also={"pad-trt7.0"}),
    Row("pad-trt7.0", pad([0, 0, 1, 0, 0, 1]), {"trt7.0"}, "trt7.0", False,
        "TensorRT 7.1 and newer"),
    Row("pad-many-dims", pad([1, 1, 1, 0, 0, 0]), span("trt7.0", "trt8.0"), "trt8.0", False,
        "TensorRT 8.2 and newer", also={"pad-trt7.0"}),
    Row("pad-pads-computed", pad([0, 0, 1, 0, 0, 1], computed=True), span("trt7.1", "trt8.0"),
        "trt8.0", True, also={"pad-trt7.0"}),
    Row("pad-axes-input", pad_axes, span("trt7.0", "trt9"), "trt9", True,
        also={"pad-nonzero", "pad-trt7.0"}),
    Row("resize-trt7.0", resize_half_pixel, {"trt7.0"}, "trt7.0", False,
        "TensorRT 7.1 and newer"),
    Row("scatternd-reduction", scatternd("add"), set(NAMES), "trt8.4", False,
        "no TensorRT version"),
    Row("scatternd-reduction-attribute", scatternd("none"), {"trt10"}, "trt10", True),
    Row("if-branch-rank", if_ranks, {"trt11"}, "trt11", False, "TensorRT before 10.1"),
    Row("loop-scan-length", loop_early_exit, set(NAMES), "trt10", False,
        "no TensorRT version"),
]


def keys_hit(model: onnx.ModelProto, profile: str) -> set[str]:
    return {h.restriction.key for h in find_hits(model, PROFILES[profile].trt_version)}


def feed(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 3 for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        out[vi.name] = np.asarray(rng.standard_normal(shape) * 2).astype(dtype)
    return out


def shapes(model: onnx.ModelProto) -> list[str]:
    """`--input NAME:SHAPE:DTYPE` for every input with symbolic dims (3 for each)."""
    args = []
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 3 for d in tt.shape.dim]
        if any(not d.HasField("dim_value") for d in tt.shape.dim):
            dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name
            args += ["--input", f"{vi.name}:{'x'.join(map(str, dims))}:{dtype}"]
    return args


def run(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def assert_same_outputs(before: onnx.ModelProto, after: onnx.ModelProto) -> None:
    inputs = feed(before)
    for a, b in zip(run(before, inputs), run(after, inputs)):
        assert a.shape == b.shape and a.dtype == b.dtype
        scale = max(float(np.abs(a.astype(np.float64)).max(initial=0.0)), 1e-30)
        assert float(np.abs(a.astype(np.float64) - b).max(initial=0.0)) / scale <= 1e-6


def _row_id(row: Row) -> str:
    return row.id or row.key


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_record_verdict_on_every_profile(row: Row):
    model = row.build()
    record = next(r for r in RESTRICTIONS if r.key == row.key)
    for name in NAMES:
        hit = keys_hit(model, name)
        assert (row.key in hit) == (name in row.hit_on), (name, hit)
        assert hit <= {row.key} | row.also, (name, hit)
    inside = sorted(row.hit_on, key=NAMES.index)[0]
    reasons = incompatibilities(model, PROFILES[inside])
    assert any(record.op in r and record.condition in r for r in reasons), reasons
    outside = [n for n in NAMES if n not in row.hit_on]
    for name in outside:
        assert not any(record.condition in r for r in incompatibilities(model, PROFILES[name]))


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_export_rewrites_or_refuses(row: Row, tmp_path):
    model = row.build()
    src, out = tmp_path / "probe.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    res = run_cli(src, "--target", row.target, "-o", out, "--iterations", "0", *shapes(model))
    record = next(r for r in RESTRICTIONS if r.key == row.key)
    if row.fixed:
        assert res.code == 0, res.err
        fitted = onnx.load(str(out))
        assert row.key not in keys_hit(fitted, row.target)
        assert incompatibilities(fitted, PROFILES[row.target]) == []
        assert_same_outputs(model, fitted)
        assert record.op in res.out and record.condition in res.out  # the note
    else:
        assert res.code == 3, (res.code, res.err)
        assert not out.exists()
        assert record.op in res.err and record.condition in res.err
        assert row.takers in res.err


def test_folding_drops_the_cone_nobody_else_reads(tmp_path):
    model = unsqueeze_axes_static_dim()
    src, out = tmp_path / "probe.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    assert run_cli(src, "--target", "trt8.6", "-o", out, "--iterations", "0",
                   *shapes(model)).code == 0
    fitted = onnx.load(str(out))
    assert [n.op_type for n in fitted.graph.node] == ["Unsqueeze"]
    axes = {i.name: numpy_helper.to_array(i) for i in fitted.graph.initializer}
    assert axes[fitted.graph.node[0].input[1]].tolist() == [0]


def test_a_cone_read_elsewhere_stays():
    from export_gelu.passes.compat import fit_to_profile

    b = B(13)
    x = b.input("x", [2, 4, 16])
    axes = b.op("Sub", b.op("Gather", b.op("Shape", x), b.c([1])), b.c([4]))
    u = b.op("Unsqueeze", x, axes)
    model = b.model(u, axes)  # the computed axes are also a graph output
    fitted, _ = fit_to_profile(copy.deepcopy(model), PROFILES["trt8.2"])
    assert [n.op_type for n in fitted.graph.node].count("Sub") == 1
    assert keys_hit(fitted, "trt8.2") == set()
    assert_same_outputs(model, fitted)


@pytest.mark.parametrize("op,axes,keepdims", [
    ("ReduceMean", [1], 0), ("ReduceMax", [2], 1), ("ReduceMin", [0, 1], 0),
    ("ReduceSumSquare", [2], 1), ("ReduceL1", [-1], 0), ("ReduceL2", [1, 2], 1),
    ("ReduceLogSum", [0], 1), ("ReduceLogSumExp", [2], 0)])
def test_opset18_reduce_rewritten_for_parsers_that_ignore_axes(op, axes, keepdims):
    from export_gelu.passes.compat import fit_to_profile

    model = reduce18(op, axes, keepdims)()
    if op in ("ReduceLogSum", "ReduceL2"):  # positive inputs for the log
        model.graph.node.insert(0, helper.make_node("Abs", ["x"], ["ax"]))
        model.graph.node[1].input[0] = "ax"
    fitted, _ = fit_to_profile(copy.deepcopy(model), PROFILES["trt9"])
    assert op not in {n.op_type for n in fitted.graph.node}
    assert keys_hit(fitted, "trt9") == set()
    assert_same_outputs(model, fitted)


def test_opset18_reducemean_over_a_symbolic_dim(tmp_path):
    b = B(18)
    x = b.input("x", [2, "seq", 16])
    model = b.model(b.op("ReduceMean", x, b.c([1]), keepdims=0))
    src, out = tmp_path / "probe.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    res = run_cli(src, "--target", "trt9", "-o", out, "--iterations", "0", *shapes(model))
    assert res.code == 0, res.err
    fitted = onnx.load(str(out))
    assert "ReduceMean" not in {n.op_type for n in fitted.graph.node}
    assert fitted.graph.input[0].type.tensor_type.shape.dim[1].dim_param == "seq"
    for seq in (3, 7):
        inputs = {"x": np.random.default_rng(seq).standard_normal((2, seq, 16)).astype(np.float32)}
        (a,), (c,) = run(model, inputs), run(fitted, inputs)
        assert np.abs(a - c).max() <= 1e-6 * np.abs(a).max()


def test_reduceprod_with_axes_is_refused_for_trt9():
    from export_gelu.passes.compat import fit_to_profile

    with pytest.raises(TargetUnmetError, match="ReduceProd .* TensorRT 10.0 and newer"):
        fit_to_profile(reduce18("ReduceProd", [1])(), PROFILES["trt9"])


def test_reduce_axes_covering_every_dim_are_harmless():
    model = reduce18("ReduceMean", [0, 1, 2])()
    assert keys_hit(model, "trt9") == set()


def test_einsum_rewrite_spells_the_ellipsis_out(tmp_path):
    model = einsum("...ij,...jk->...ik", [2, 3, 4, 5], [2, 3, 5, 6])()
    from export_gelu.passes.compat import fit_to_profile

    fitted, _ = fit_to_profile(copy.deepcopy(model), PROFILES["trt8.2"])
    (node,) = fitted.graph.node
    equation = helper.get_attribute_value(node.attribute[0]).decode()
    assert "..." not in equation and equation.count(",") == 1
    lhs, rhs = equation.split("->")
    assert all(len(t) == 4 for t in lhs.split(",")) and len(rhs) == 4


def test_inspect_json_gives_each_profile_its_verdict(tmp_path):
    import json

    src = tmp_path / "trilu.onnx"
    onnx.save(trilu([2, 2, 4, 4])(), str(src))
    info = json.loads(run_cli("inspect", src, "--json").out)
    table = info["compatibility"]
    assert any("Trilu" in r and "rank 4" in r for r in table["trt8.5"])
    for name in ("trt8.6", "trt9", "trt10", "trt11"):
        assert table[name] == []
    assert info["after_export"]["trt8.5"]["fits"] is True


def test_computed_axes_folded_before_down_conversion(tmp_path):
    """trt7.0 takes opset 11: the down-converter needs Unsqueeze-13's axes as an attribute,
    which a computed (constant in fact) axes input becomes once folded."""
    model = unsqueeze_axes_static_dim()
    src, out = tmp_path / "probe.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    res = run_cli(src, "--target", "trt7.0", "-o", out, "--iterations", "0", *shapes(model))
    assert res.code == 0, res.err
    fitted = onnx.load(str(out))
    assert [n.op_type for n in fitted.graph.node] == ["Unsqueeze"]
    assert helper.get_attribute_value(fitted.graph.node[0].attribute[0]) == [0]
    assert_same_outputs(model, fitted)
