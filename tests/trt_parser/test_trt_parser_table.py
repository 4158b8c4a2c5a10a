"""The TensorRT parser's op table and opset ranges (export_gelu/trt_parser/ops.py) as the
static check and `inspect` apply them: one probe graph per op row, judged by every named
profile and by exact versions where a line changes inside; verdicts read from the parser's
sources, written out by hand, so the table is not only checked against itself."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, defs, helper

from export_gelu.parse_check import incompatibilities
from export_gelu.targets import PROFILES, TRT_PROFILES, resolve_profile
from export_gelu.trt_parser.ops import (
    IMPORTER_SOURCES,
    OPSET_RANGES,
    PARSER_OPS,
    first_version,
    imported_ops,
)
from export_gelu.trt_parser.versions import version_key
from tests.conftest import run_cli

#: Exact versions probed besides the named profiles: where an op or a range starts inside a
#: line (8.2.3 the plugin; 9.1 CastLike; 9.2 Hardmax; 10.4 windows; 10.5 STFT; 10.14
#: Attention; 10.15 opset 24; 11.2 DFT; 11.5 opset 25) and one release after each (8.4.3, a
#: tag of NVIDIA/TensorRT, after 8.2.3: 8.3 was never released).
EXACT = ("8.2.3", "8.4.3", "9.1", "9.2", "9.3", "10.1", "10.4", "10.5", "10.13", "10.14",
         "10.15", "11.1", "11.2", "11.5")
ALL_PROFILES = [*TRT_PROFILES, *(resolve_profile(f"trt{v}") for v in EXACT)]

#: Hand-written from the sources (onnx/onnx-tensorrt DEFINE_BUILTIN_OP_IMPORTER lists at the
#: release tags 7.0 … 10.1, its Changelog.md to 10.15, NVIDIA/TensorRT CHANGELOG 11.0 and the
#: v11.2 release notes): the first TensorRT that parses each op; None: no version does.
FROM_THE_SOURCES: dict[str, str | None] = {
    "Erf": "7.0", "Tanh": "7.0", "Where": "7.0", "Expand": "7.0", "ConstantOfShape": "7.0",
    "Range": "7.0", "Loop": "7.0", "Scan": "7.0", "Dropout": "7.0", "Reciprocal": "7.0",
    "RandomUniform": "7.0", "QuantizeLinear": "7.0",
    "If": "7.1", "GlobalLpPool": "7.1",
    "NonMaxSuppression": "8.0", "CumSum": "8.0", "GatherElements": "8.0", "Celu": "8.0",
    "Einsum": "8.2", "IsNaN": "8.2", "ScatterND": "8.2", "GatherND": "8.2",
    "HardSwish": "8.4", "Xor": "8.4", "Shrink": "8.4",
    "OneHot": "8.5", "RandomNormalLike": "8.5", "RandomNormal": "8.5", "Mod": "8.5",
    "Trilu": "8.5", "NonZero": "8.5", "GridSample": "8.5",
    "LayerNormalization": "8.6", "GroupNormalization": "8.6", "IsInf": "8.6",
    "CastLike": "9.1", "Hardmax": "9.2",
    "Gelu": "10.0", "Mish": "10.0", "DeformConv": "10.1",
    "BlackmanWindow": "10.4", "HannWindow": "10.4", "HammingWindow": "10.4", "STFT": "10.5",
    "Attention": "10.14", "RMSNormalization": "10.15", "RotaryEmbedding": "10.15",
    "TensorScatter": "10.15", "Swish": "11.0", "DFT": "11.2",
    **dict.fromkeys([
        "Unique", "Compress", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
        "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence",
        "ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement",
        "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "StringNormalizer",
        "StringConcat", "StringSplit", "RegexFullMatch", "QLinearConv", "QLinearMatMul",
        "MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "SoftmaxCrossEntropyLoss",
        "NegativeLogLikelihoodLoss", "Det", "AffineGrid", "Col2Im", "CenterCropPad",
        "Bernoulli", "Multinomial", "TfIdfVectorizer", "MaxUnpool", "MaxRoiPool",
        "ImageDecoder", "MelWeightMatrix"]),
}


def _branch() -> onnx.GraphProto:
    out = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])
    const = helper.make_node("Constant", [], ["b"], value=helper.make_tensor(
        "v", TensorProto.FLOAT, [2, 3], [0.0] * 6))
    return helper.make_graph([const], "branch", [], [out])


#: A stand-in value for each required attribute type of a probe node.
_ATTR_VALUES = {
    defs.OpSchema.AttrType.INT: 1, defs.OpSchema.AttrType.FLOAT: 1.0,
    defs.OpSchema.AttrType.STRING: "", defs.OpSchema.AttrType.INTS: [1],
    defs.OpSchema.AttrType.FLOATS: [1.0], defs.OpSchema.AttrType.STRINGS: [""],
    defs.OpSchema.AttrType.TENSOR: helper.make_tensor("t", TensorProto.FLOAT, [1], [0.0]),
}


def probe(op: str) -> onnx.ModelProto:
    """One node of `op` with its minimal inputs and outputs and its required attributes (from
    the ONNX schema where there is one), at the opset that introduced its newest form. Built
    to be judged, not run."""
    attrs: dict[str, object] = {}
    try:
        schema = defs.get_schema(op)
        if schema.deprecated:  # Scatter, Upsample: the last opset before they were dropped
            schema = defs.get_schema(op, schema.since_version - 1)
        n_in, n_out, opset = schema.min_input, max(schema.min_output, 1), schema.since_version
        for name, attr in schema.attributes.items():
            if attr.required:
                graph = attr.type == defs.OpSchema.AttrType.GRAPH
                attrs[name] = _branch() if graph else _ATTR_VALUES[attr.type]
    except defs.SchemaError:  # ops dropped from ONNX (ImageScaler, ScaledTanh, …)
        n_in, n_out, opset = 1, 1, 9
    ins = [f"i{k}" for k in range(n_in)]
    outs = [f"o{k}" for k in range(n_out)]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ins + outs]
    node = helper.make_node(op, ins, outs, name=f"probe_{op}", **attrs)
    graph = helper.make_graph([node], f"probe_{op}", vi[:n_in], vi[n_in:])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def op_refusals(model: onnx.ModelProto, profile) -> list[str]:
    return [r for r in incompatibilities(model, profile) if r.startswith("op ")]


def takes(since: str | None, version: str) -> bool:
    return since is not None and version_key(version) >= version_key(since)


def test_the_table_covers_the_parser_docs_and_cites_every_row():
    assert len(PARSER_OPS) >= 180
    assert set(FROM_THE_SOURCES) <= set(PARSER_OPS)
    for row in PARSER_OPS.values():
        assert row.source  # importer version → a tag/file, or the 'never' provenance
        assert row.importer is None or row.importer in IMPORTER_SOURCES
    assert {"Dropout", "Reciprocal", "If", "GlobalLpPool", "HardSwish", "Mod", "OneHot",
            "SoftmaxCrossEntropyLoss"} <= {r.op for r in PARSER_OPS.values() if r.note}
    assert PARSER_OPS["If"].docs == "8.0" and PARSER_OPS["If"].importer == "7.1"


@pytest.mark.parametrize("op", sorted(PARSER_OPS))
def test_every_op_row_gets_the_parsers_verdict_on_every_profile(op):
    """Each row, on every named profile and the exact versions: refused with the parser's
    reason where its importer does not exist yet (or never), and no false refusal where it
    does."""
    model = probe(op)
    since = PARSER_OPS[op].importer
    for profile in ALL_PROFILES:
        refused = op_refusals(model, profile)
        if takes(since, profile.trt_version):
            assert refused == [], (profile.name, refused)
            assert op in imported_ops(profile.trt_version)
        elif since is None:
            assert refused == [f"op {op} unsupported (no TensorRT version parses it)"]
        else:
            assert refused == [f"op {op} unsupported (TensorRT parses it from {since})"], \
                profile.name
    for name in ("onnx", "ort"):  # not judged by the TensorRT table
        assert op_refusals(model, PROFILES[name]) == []


@pytest.mark.parametrize("op", sorted(FROM_THE_SOURCES))
def test_the_table_agrees_with_the_sources_read_by_hand(op):
    since = FROM_THE_SOURCES[op]
    assert first_version(op) == since
    model = probe(op)
    for profile in ALL_PROFILES:
        refused = bool(op_refusals(model, profile))
        assert refused is not takes(since, profile.trt_version), (op, profile.name)


@pytest.mark.parametrize("op,refused_on,taken_by", [
    ("CastLike", ["trt8.6", "trt9"], ["trt9.1", "trt10", "trt11"]),
    ("Hardmax", ["trt9", "trt9.1"], ["trt9.2", "trt9.3", "trt10"]),
    ("OneHot", ["trt8.4"], ["trt8.5", "trt8.6"]),
    ("RandomNormalLike", ["trt8.4"], ["trt8.5"]),
    ("If", ["trt7.0"], ["trt7.1", "trt7.2", "trt8.0"]),
    ("NonMaxSuppression", ["trt7.0", "trt7.1", "trt7.2"], ["trt8.0", "trt8.2"]),
    ("Mish", ["trt9", "trt9.3"], ["trt10", "trt10.1"]),
    ("HannWindow", ["trt10", "trt10.1"], ["trt10.4", "trt10.5", "trt11"]),
    ("STFT", ["trt10.4"], ["trt10.5", "trt10.13", "trt11"]),
    ("DFT", ["trt10.15", "trt11", "trt11.1"], ["trt11.2", "trt11.5"]),
    ("Attention", ["trt10.13"], ["trt10.14", "trt10.15", "trt11"]),
    ("Unique", [p.name for p in ALL_PROFILES], []),
    ("MatMulInteger", [p.name for p in ALL_PROFILES], []),
])
def test_inspect_gives_the_verdict_per_target(op, refused_on, taken_by, tmp_path):
    path = tmp_path / f"{op}.onnx"
    onnx.save(probe(op), str(path))
    args = [a for name in refused_on + taken_by for a in ("--target", name)]
    res = run_cli("inspect", path, "--json", "--no-dry-run", *args)
    assert res.code == (3 if refused_on else 0), res.err
    compat = json.loads(res.out)["compatibility"]
    for name in refused_on:
        assert any(r.startswith(f"op {op} unsupported (") for r in compat[name]), name
    for name in taken_by:
        assert not any(r.startswith(f"op {op} ") for r in compat[name]), name


def test_an_op_no_parser_knows_is_refused_everywhere():
    model = probe("Relu")
    model.graph.node[0].op_type = "NotAnOnnxOp"
    for profile in ALL_PROFILES:
        assert op_refusals(model, profile) == [
            "op NotAnOnnxOp unsupported (no TensorRT parser knows it)"]


def test_opset_floor_and_ceiling_per_version():
    assert [(r.since, r.floor, r.ceiling) for r in OPSET_RANGES] == [
        ("7.0", 7, 11), ("8.0", 7, 13), ("8.4", 7, 17), ("9.0", 7, 19), ("10.0", 9, 20),
        ("10.15", 9, 24), ("11.0", 9, 24), ("11.5", 9, 25)]
    expect = {"7.2": (7, 11), "8.2.3": (7, 13), "8.6": (7, 17), "9.3": (7, 19),
              "10.13": (9, 20), "10.15": (9, 24), "11.4": (9, 24), "11.5": (9, 25)}
    for version, (floor, ceiling) in expect.items():
        prof = resolve_profile(f"trt{version}")
        assert (prof.opset_floor, prof.opset_ceiling) == (floor, ceiling), version


def test_an_opset_8_graph_is_refused_below_the_floor_of_10_and_11(tmp_path):
    model = probe("Relu")
    model.opset_import[0].version = 8
    assert incompatibilities(model, PROFILES["trt9"]) == []
    assert incompatibilities(model, PROFILES["trt10"]) == [
        "opset 8 below floor 9 (TensorRT 10.0 takes opset 9 to 20)"]
    assert incompatibilities(model, resolve_profile("trt11.5")) == [
        "opset 8 below floor 9 (TensorRT 11.5 takes opset 9 to 25)"]
    path = tmp_path / "relu8.onnx"
    onnx.save(model, str(path))
    res = run_cli("inspect", path, "--target", "trt10", "--no-dry-run")
    assert res.code == 3 and "opset 8 below floor 9" in res.out


def test_unfixable_ops_name_the_exact_versions_that_take_them(tmp_path):
    """An export that meets an op its target lacks exits 3 naming the first version that
    parses it (an exact one where a line changes inside) and the named targets after it."""
    from export_gelu.parse_check import takers_text

    assert takers_text("CastLike") == "TensorRT 9.1 and newer: trt9.1, trt10, trt11"
    assert takers_text("DFT") == "TensorRT 11.2 and newer: trt11.2"
    assert takers_text("Gelu") == "TensorRT 10.0 and newer: trt10, trt11"
    assert takers_text("Unique") == "no TensorRT version"
    path = tmp_path / "unique.onnx"
    onnx.save(probe("Unique"), str(path))
    res = run_cli(path, "--target", "trt10", "-o", tmp_path / "o.onnx", "--no-verify")
    assert res.code == 3
    assert "op Unique is not parsed by trt10 and export-gelu has no rewrite for it (taken by no " \
           "TensorRT version)" in res.err
    assert not (tmp_path / "o.onnx").exists()


def test_inspect_says_where_an_engine_can_be_built(tmp_path):
    from export_gelu.check.runners.trt_runner import local_engine_blocker

    path = tmp_path / "relu.onnx"
    onnx.save(probe("Relu"), str(path))
    res = run_cli("inspect", path, "--json", "--no-dry-run")
    engines = json.loads(res.out)["engine_here"]
    assert set(engines) == {p.name for p in TRT_PROFILES}
    for p in TRT_PROFILES:
        why = local_engine_blocker(p.trt_version)
        assert engines[p.name] == {"here": why is None, "reason": why or "",
                                   "device_only": version_key(p.trt_version) < (8, 5, 0)}
    for name in ("trt7.0", "trt8.4"):
        assert not engines[name]["here"] and engines[name]["device_only"]
        assert "polygraphy supports TensorRT 8.5 and newer only" in engines[name]["reason"]
    table = run_cli("inspect", path, "--no-dry-run").out.splitlines()
    rows = {line.split()[0]: line.split() for line in table[2:2 + len(PROFILES)]}
    assert rows["trt8.2"][3] == "device" and rows["onnx"][3] == "-"
    assert rows["trt10"][3] == ("yes" if engines["trt10"]["here"] else "no")
    assert any(line.startswith("  engine here: device only for trt7.0–trt8.4") for line in table)
