"""Which ONNX ops the TensorRT ONNX parser of each version imports, and its opset range.

Data read from the parser's own sources; docs/tensorrt.md says how and how to update it.

`OP_TABLE` has one row per ONNX op named in any onnx-tensorrt operators.md (7.0 … 10.15) or
importer list (7.0 … 10.1), plus the ops later changelogs add:

    op | importer | docs

- importer: the first TensorRT whose parser registers an importer for the op
  (`DEFINE_BUILTIN_OP_IMPORTER(op)`), which is what decides whether a node parses; `-` when
  no version does. Where it is read: `IMPORTER_SOURCES[importer]` (`NEVER_SOURCE` for `-`).
- docs: the first TensorRT whose operators.md marks the op `Y` (`-`: none of those read,
  7.0 … 10.15). Where it differs from the importer, the source is what runs.
`NOTES` says why, where docs and source disagree, and other provenance worth knowing.

An op that is not in the table is unknown to every parser version: it does not parse.
No importer has ever been removed from the parser for a standard ONNX op (7.0 … 10.1 compared
tag by tag, and 11.0's importer list equals this table's rows up to 11.0), so a row needs no
"until" column.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from export_gelu.trt_parser.versions import version_key

_OTT = "onnx/onnx-tensorrt"

#: Where the importer list of the release that first has an op was read.
IMPORTER_SOURCES: dict[str, str] = {
    "7.0": f"{_OTT} 84b5be1 (TensorRT 7.0 open source release) builtin_op_importers.cpp",
    "7.1": f"{_OTT} tag release/7.1 builtin_op_importers.cpp",
    "8.0": f"{_OTT} tag release/8.0 builtin_op_importers.cpp",
    "8.2": f"{_OTT} tag release/8.2-GA builtin_op_importers.cpp",
    "8.4": f"{_OTT} tag release/8.4-GA builtin_op_importers.cpp",
    "8.5": f"{_OTT} tag release/8.5-GA builtin_op_importers.cpp",
    "8.6": f"{_OTT} tag release/8.6-GA builtin_op_importers.cpp",
    "9.1": f"{_OTT} branch 9.1 (9.1 GA) builtin_op_importers.cpp",
    "9.2": f"{_OTT} branch 9.2 (9.2 GA) builtin_op_importers.cpp",
    "10.0": f"{_OTT} tag release/10.0-GA onnxOpImporters.cpp",
    "10.1": f"{_OTT} tag release/10.1-GA onnxOpImporters.cpp",
    "10.4": f"{_OTT} docs/Changelog.md, TensorRT 10.4 GA",
    "10.5": f"{_OTT} docs/Changelog.md, TensorRT 10.5 GA",
    "10.14": f"{_OTT} docs/Changelog.md, TensorRT 10.14 GA",
    "10.15": f"{_OTT} docs/Changelog.md, TensorRT 10.15 GA",
    "11.0": f"{_OTT} 5ab48c5 (the parsers/onnx submodule of NVIDIA/TensorRT release/11.0) "
            "onnxOpImporters.cpp",
    "11.2": "NVIDIA/TensorRT release v11.2 notes (Parsers)",
}
#: Why a row says no version imports the op.
NEVER_SOURCE = (f"no DEFINE_BUILTIN_OP_IMPORTER at any {_OTT} release tag 7.0 … 10.1 nor at "
                "5ab48c5 (11.0); operators.md 10.15 says N; no parser changelog entry through "
                "11.5")

#: Docs-vs-source disagreements and other provenance, by op (the table's notes column).
NOTES: dict[str, str] = {
    "Attention": "importer from 10.14 (changelog); operators.md lists it from 10.15",
    "BlackmanWindow": "importer from 10.4 (changelog); operators.md lists it from 10.15",
    "DFT": "operators.md 10.15 says N; added in 11.2 through a cuFFT plugin (NVIDIA/TensorRT "
           "v11.2 release notes)",
    "Dropout": "operators.md says N until 8.0; the importer (an identity) exists from 7.0",
    "GlobalLpPool": "operators.md says N until 8.0 and NVIDIA/TensorRT CHANGELOG 8.0.1 calls it "
                    "new; the importer exists from 7.1",
    "HammingWindow": "importer from 10.4 (changelog); operators.md lists it from 10.15",
    "HannWindow": "importer from 10.4 (changelog); operators.md lists it from 10.15",
    "HardSwish": "operators.md says N until 8.6; the importer exists from 8.4",
    "If": "operators.md says N until 8.0; the importer exists from 7.1 (none in 7.0)",
    "Mod": "operators.md says N until 8.6 (onnx-tensorrt 47de8a1 'Mark Mod as supported'); "
           "the importer exists from 8.5",
    "NonMaxSuppression": "8.0 imports it through a plugin (NVIDIA/TensorRT CHANGELOG 8.0.1: "
                         "'experimental support'); native from 8.5",
    "OneHot": "operators.md says N until 8.6 (onnx-tensorrt 7029da0 'Mark OneHot and HardSwish "
              "as supported'); the importer exists from 8.5",
    "RandomUniform": "the onnx-tensorrt 8.5 changelog lists it as added; the importer exists "
                     "from 7.0",
    "Reciprocal": "operators.md says N until 8.5; the importer exists from 7.0",
    "SoftmaxCrossEntropyLoss": "NVIDIA/TensorRT CHANGELOG 8.0.1 lists it as added, but no "
                               "release tag registers an importer and operators.md says N",
    "STFT": "importer from 10.5 (changelog: real-valued input); operators.md lists it from 10.15",
    "Swish": "absent from operators.md 10.15; added in 11.0 (NVIDIA/TensorRT CHANGELOG 11.0, "
             "and its importer at 5ab48c5)",
}

#: Importers the onnx-tensorrt 7.2.1 *branch* gained after the 7.2.1 release tag, for the NGC
#: 21.02 and 21.03 container parsers (tags 21.02, 21.03): a 7.2.x parser built from that
#: branch takes them; the first TensorRT release that ships them is 8.0.
_CONTAINER_72 = {"21.02": ("Celu", "CumSum", "GreaterOrEqual", "LessOrEqual", "LpNormalization",
                           "LpPool", "ReverseSequence"),
                 "21.03": ("EyeLike", "GatherElements")}
NOTES.update({op: f"also in the onnx-tensorrt 7.2.1 branch from container tag {tag} (not in the "
                   "7.2.1 release); the first TensorRT release with it is 8.0"
              for tag, ops in _CONTAINER_72.items() for op in ops})

OP_TABLE = """
Abs                       | 7.0   | 7.0
Acos                      | 7.0   | 7.0
Acosh                     | 7.0   | 7.0
Add                       | 7.0   | 7.0
AffineGrid                | -     | -
And                       | 7.0   | 7.0
ArgMax                    | 7.0   | 7.0
ArgMin                    | 7.0   | 7.0
Asin                      | 7.0   | 7.0
Asinh                     | 7.0   | 7.0
Atan                      | 7.0   | 7.0
Atanh                     | 7.0   | 7.0
Attention                 | 10.14 | 10.15
AveragePool               | 7.0   | 7.0
BatchNormalization        | 7.0   | 7.0
Bernoulli                 | -     | -
BitShift                  | -     | -
BitwiseAnd                | -     | -
BitwiseNot                | -     | -
BitwiseOr                 | -     | -
BitwiseXor                | -     | -
BlackmanWindow            | 10.4  | 10.15
Cast                      | 7.0   | 7.0
CastLike                  | 9.1   | 9.1
Ceil                      | 7.0   | 7.0
Celu                      | 8.0   | 8.0
CenterCropPad             | -     | -
Clip                      | 7.0   | 7.0
Col2Im                    | -     | -
Compress                  | -     | -
Concat                    | 7.0   | 7.0
ConcatFromSequence        | -     | -
Constant                  | 7.0   | 7.0
ConstantOfShape           | 7.0   | 7.0
Conv                      | 7.0   | 7.0
ConvInteger               | -     | -
ConvTranspose             | 7.0   | 7.0
Cos                       | 7.0   | 7.0
Cosh                      | 7.0   | 7.0
CumSum                    | 8.0   | 8.0
DeformConv                | 10.1  | 10.1
DepthToSpace              | 7.0   | 7.0
DequantizeLinear          | 7.0   | 7.0
Det                       | -     | -
DFT                       | 11.2  | -
Div                       | 7.0   | 7.0
Dropout                   | 7.0   | 8.0
DynamicQuantizeLinear     | -     | -
Einsum                    | 8.2   | 8.2
Elu                       | 7.0   | 7.0
Equal                     | 7.0   | 7.0
Erf                       | 7.0   | 7.0
Exp                       | 7.0   | 7.0
Expand                    | 7.0   | 7.0
EyeLike                   | 8.0   | 8.0
Flatten                   | 7.0   | 7.0
Floor                     | 7.0   | 7.0
Gather                    | 7.0   | 7.0
GatherElements            | 8.0   | 8.0
GatherND                  | 8.2   | 8.2
Gelu                      | 10.0  | 10.0
Gemm                      | 7.0   | 7.0
GlobalAveragePool         | 7.0   | 7.0
GlobalLpPool              | 7.1   | 8.0
GlobalMaxPool             | 7.0   | 7.0
Greater                   | 7.0   | 7.0
GreaterOrEqual            | 8.0   | 8.0
GridSample                | 8.5   | 8.5
GroupNormalization        | 8.6   | 8.6
GRU                       | 7.0   | 7.0
HammingWindow             | 10.4  | 10.15
HannWindow                | 10.4  | 10.15
Hardmax                   | 9.2   | 9.2
HardSigmoid               | 7.0   | 7.0
HardSwish                 | 8.4   | 8.6
Identity                  | 7.0   | 7.0
If                        | 7.1   | 8.0
ImageDecoder              | -     | -
ImageScaler               | 7.0   | 7.0
InstanceNormalization     | 7.0   | 7.0
IsInf                     | 8.6   | 8.6
IsNaN                     | 8.2   | 8.2
LayerNormalization        | 8.6   | 8.6
LeakyRelu                 | 7.0   | 7.0
Less                      | 7.0   | 7.0
LessOrEqual               | 8.0   | 8.0
Log                       | 7.0   | 7.0
LogSoftmax                | 7.0   | 7.0
Loop                      | 7.0   | 7.0
LpNormalization           | 8.0   | 8.0
LpPool                    | 8.0   | 8.0
LRN                       | 7.0   | 7.0
LSTM                      | 7.0   | 7.0
MatMul                    | 7.0   | 7.0
MatMulInteger             | -     | -
Max                       | 7.0   | 7.0
MaxPool                   | 7.0   | 7.0
MaxRoiPool                | -     | -
MaxUnpool                 | -     | -
Mean                      | 7.0   | 7.0
MeanVarianceNormalization | 8.5   | 8.5
MelWeightMatrix           | -     | -
Min                       | 7.0   | 7.0
Mish                      | 10.0  | 10.0
Mod                       | 8.5   | 8.6
Mul                       | 7.0   | 7.0
Multinomial               | -     | -
Neg                       | 7.0   | 7.0
NegativeLogLikelihoodLoss | -     | -
NonMaxSuppression         | 8.0   | 8.0
NonZero                   | 8.5   | 8.5
Not                       | 7.0   | 7.0
OneHot                    | 8.5   | 8.6
Optional                  | -     | -
OptionalGetElement        | -     | -
OptionalHasElement        | -     | -
Or                        | 7.0   | 7.0
Pad                       | 7.0   | 7.0
ParametricSoftplus        | 7.0   | 7.0
Pow                       | 7.0   | 7.0
PRelu                     | 7.0   | 7.0
QLinearConv               | -     | -
QLinearMatMul             | -     | -
QuantizeLinear            | 7.0   | 7.0
RandomNormal              | 8.5   | 8.5
RandomNormalLike          | 8.5   | 8.5
RandomUniform             | 7.0   | 7.0
RandomUniformLike         | 7.0   | 7.0
Range                     | 7.0   | 7.0
Reciprocal                | 7.0   | 8.5
ReduceL1                  | 7.0   | 7.0
ReduceL2                  | 7.0   | 7.0
ReduceLogSum              | 7.0   | 7.0
ReduceLogSumExp           | 7.0   | 7.0
ReduceMax                 | 7.0   | 7.0
ReduceMean                | 7.0   | 7.0
ReduceMin                 | 7.0   | 7.0
ReduceProd                | 7.0   | 7.0
ReduceSum                 | 7.0   | 7.0
ReduceSumSquare           | 7.0   | 7.0
RegexFullMatch            | -     | -
Relu                      | 7.0   | 7.0
Reshape                   | 7.0   | 7.0
Resize                    | 7.0   | 7.0
ReverseSequence           | 8.0   | 8.0
RMSNormalization          | 10.15 | 10.15
RNN                       | 7.0   | 7.0
RoiAlign                  | 8.5   | 8.5
RotaryEmbedding           | 10.15 | 10.15
Round                     | 8.2   | 8.2
ScaledTanh                | 7.0   | 7.0
Scan                      | 7.0   | 7.0
Scatter                   | 8.2   | 8.2
ScatterElements           | 8.2   | 8.2
ScatterND                 | 8.2   | 8.2
Selu                      | 7.0   | 7.0
SequenceAt                | -     | -
SequenceConstruct         | -     | -
SequenceEmpty             | -     | -
SequenceErase             | -     | -
SequenceInsert            | -     | -
SequenceLength            | -     | -
SequenceMap               | -     | -
Shape                     | 7.0   | 7.0
Shrink                    | 8.4   | 8.4
Sigmoid                   | 7.0   | 7.0
Sign                      | 8.2   | 8.2
Sin                       | 7.0   | 7.0
Sinh                      | 7.0   | 7.0
Size                      | 7.0   | 7.0
Slice                     | 7.0   | 7.0
Softmax                   | 7.0   | 7.0
SoftmaxCrossEntropyLoss   | -     | -
Softplus                  | 7.0   | 7.0
Softsign                  | 7.0   | 7.0
SpaceToDepth              | 7.0   | 7.0
Split                     | 7.0   | 7.0
SplitToSequence           | -     | -
Sqrt                      | 7.0   | 7.0
Squeeze                   | 7.0   | 7.0
STFT                      | 10.5  | 10.15
StringConcat              | -     | -
StringNormalizer          | -     | -
StringSplit               | -     | -
Sub                       | 7.0   | 7.0
Sum                       | 7.0   | 7.0
Swish                     | 11.0  | -
Tan                       | 7.0   | 7.0
Tanh                      | 7.0   | 7.0
TensorScatter             | 10.15 | 10.15
TfIdfVectorizer           | -     | -
ThresholdedRelu           | 7.0   | 7.0
Tile                      | 7.0   | 7.0
TopK                      | 7.0   | 7.0
Transpose                 | 7.0   | 7.0
Trilu                     | 8.5   | 8.5
Unique                    | -     | -
Unsqueeze                 | 7.0   | 7.0
Upsample                  | 7.0   | 7.0
Where                     | 7.0   | 7.0
Xor                       | 8.4   | 8.4
"""


@dataclass(frozen=True)
class ParserOp:
    """One row of `OP_TABLE`."""

    op: str
    importer: str | None  # first TensorRT whose parser imports it; None: none does
    docs: str | None  # first TensorRT whose operators.md says Y; None: none (≤ 10.15)
    note: str  # docs-vs-source disagreement or other provenance (`NOTES`)

    @property
    def source(self) -> str:
        return IMPORTER_SOURCES[self.importer] if self.importer else NEVER_SOURCE


def _parse(table: str) -> dict[str, ParserOp]:
    rows: dict[str, ParserOp] = {}
    for line in table.strip().splitlines():
        op, importer, docs = (c.strip() for c in line.split("|"))
        rows[op] = ParserOp(op, None if importer == "-" else importer,
                            None if docs == "-" else docs, NOTES.get(op, ""))
    return rows


#: Every row of `OP_TABLE`, by op type.
PARSER_OPS: dict[str, ParserOp] = _parse(OP_TABLE)


@dataclass(frozen=True)
class OpsetRange:
    """The opsets the parser of a range of TensorRT versions takes, and where that was read."""

    since: str  # first TensorRT version it applies to (until the next record)
    floor: int
    ceiling: int
    source: str


#: Opset floor and ceiling by version, oldest first. The ceiling is what operators.md states
#: ("supports operators up to Opset N" / "in the inclusive range of opset 9 to opset N").
#: The floor: every parser logs "TensorRT supports ONNX graphs generated with at least opset
#: 7" below 7 (ModelImporter.cpp), and from 10.0 operators.md states the range starts at 9.
#: Where a version's docs were not read, the last stated range stands (10.2 … 10.14: 20).
OPSET_RANGES: tuple[OpsetRange, ...] = (
    OpsetRange("7.0", 7, 11, f"{_OTT} 84b5be1, release/7.1, release/7.2.1 operators.md"),
    OpsetRange("8.0", 7, 13, f"{_OTT} release/8.0, release/8.2-GA docs/operators.md"),
    OpsetRange("8.4", 7, 17, f"{_OTT} release/8.4-GA … release/8.6-GA docs/operators.md"),
    OpsetRange("9.0", 7, 19, f"{_OTT} branches 9.0-GA … 9.3 docs/operators.md"),
    OpsetRange("10.0", 9, 20, f"{_OTT} release/10.0-GA, release/10.1-GA docs/operators.md"),
    OpsetRange("10.15", 9, 24, f"{_OTT} docs/operators.md headed TensorRT 10.15"),
    OpsetRange("11.0", 9, 24, "no 11.0 … 11.4 operators.md read: 10.15's range kept until "
                              "11.5 added opset 25"),
    OpsetRange("11.5", 9, 25, f"{_OTT} release/11.5-GA notes: \"Added support for ONNX opset "
                              "25\""),
)

#: The versions the data covers: 7.0 <= version < 12.
KNOWN_SINCE, KNOWN_BEFORE = "7.0", "12"


def opset_range(version: str) -> OpsetRange:
    """The opset floor/ceiling record for TensorRT `version` (7.0 … 11.x)."""
    key = version_key(version)
    return [r for r in OPSET_RANGES if version_key(r.since) <= key][-1] \
        if key >= version_key(OPSET_RANGES[0].since) else OPSET_RANGES[0]


@lru_cache(maxsize=64)
def imported_ops(version: str) -> frozenset[str]:
    """Every op type the parser of TensorRT `version` has an importer for."""
    key = version_key(version)
    return frozenset(r.op for r in PARSER_OPS.values()
                     if r.importer and version_key(r.importer) <= key)


def first_version(op: str) -> str | None:
    """The first TensorRT whose parser imports `op`; None when none does (or op is unknown)."""
    row = PARSER_OPS.get(op)
    return row.importer if row else None


def refusal(op: str, version: str) -> str | None:
    """Why the parser of TensorRT `version` refuses a node of type `op`, or None if it
    imports it. One dict lookup (plus a version comparison)."""
    row = PARSER_OPS.get(op)
    if row is None:
        return "no TensorRT parser knows it"
    if row.importer is None:
        return "no TensorRT version parses it"
    if version_key(version) < version_key(row.importer):
        return f"TensorRT parses it from {row.importer}"
    return None
