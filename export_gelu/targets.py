"""Target profiles as data and how a target name resolves to one.

A profile says what a runtime version accepts: its opset range, which ops its parser imports,
whether the GELU plugin can be created there, how precision is requested, and how GELU should
be lowered. The export flow, the ONNX passes and the static compatibility check
(`export_gelu.parse_check`) all read these records.

TensorRT profiles are built from the parser's tables (`export_gelu.trt_parser`): one named
profile per release line, standing for the line's FIRST release (`trt9` is 9.0, `trt8.2` is
8.2.0), so that a graph fitted to it never meets a refusal on any release of the line; and
any exact version as a target of its own (`trt8.2.3`, `trt9.2`, `trt10.13`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

from export_gelu.trt_parser import ops as parser_ops
from export_gelu.trt_parser.plugin import PLUGIN_OP, plugin_support  # noqa: F401 - re-exported
from export_gelu.trt_parser.versions import (
    in_range,
    nearest_released,
    released_line,
    version_key,
)

#: The highest opset the exporters here produce reliably; a ceiling above it is not used.
EXPORT_OPSET_MAX = 20

#: First TensorRT parsing each op that 7.0 lacks (derived from the parser's table; kept for
#: callers that want the short list). Ops no version parses are not in it.
TRT_OP_SINCE: dict[str, str] = {
    op: row.importer for op, row in parser_ops.PARSER_OPS.items()
    if row.importer and row.importer != parser_ops.KNOWN_SINCE
}

#: Ops export-gelu's own passes emit (GELU primitives, LayerNormalization expansion, attention
#: and IsNaN rewrites, opset adapters). Every TensorRT version here parses all of them.
EMITTED_OPS = frozenset({
    "Erf", "Tanh", "Pow", "Mul", "Add", "Sub", "Div", "Sigmoid", "Clip", "Sqrt", "Cast",
    "ReduceMean", "ReduceMax", "Not", "Equal", "Greater", "Softmax", "MatMul", "Transpose",
    "Reshape", "Slice", "Concat", "Identity", "Constant", "Shape", "Squeeze", "Unsqueeze",
    "Split",
})

#: Precision facts by TensorRT version: BF16 builder support from 9.0 (onnx-tensorrt 9.0 GA
#: changelog "Added support for FP8 and BF16"), strongly typed networks only from 11.0 (the
#: FP16/BF16 builder flags are gone there).
BF16_SINCE = "9.0"
STRONGLY_TYPED_SINCE = "11.0"

#: The named TensorRT targets: (name, the release it stands for), oldest first.
TRT_LINES: tuple[tuple[str, str], ...] = (
    ("trt7.0", "7.0"), ("trt7.1", "7.1"), ("trt7.2", "7.2"), ("trt8.0", "8.0"),
    ("trt8.2", "8.2"), ("trt8.4", "8.4"), ("trt8.5", "8.5"), ("trt8.6", "8.6"),
    ("trt9", "9.0"), ("trt10", "10.0"), ("trt11", "11.0"),
)

@dataclass(frozen=True)
class TargetProfile:
    """What one runtime (and version) accepts, and how GELU should be lowered for it."""

    name: str
    runtime: str  # "onnx" | "ort" | "trt"
    opset_ceiling: int
    ops: frozenset[str] = field(default_factory=frozenset)  # TensorRT: every op it imports
    gelu_plugin: str = "none"  # none | unmappable | no_fields | yes | deprecated | removed
    precision_api: str = "none"  # none | builder_flags | strongly_typed
    precisions: tuple[str, ...] = ("fp32", "fp16")
    gelu_lowering: str = "primitives"  # onnx_gelu | ort_contrib | primitives
    trt_version: str = ""  # the exact TensorRT release a TensorRT profile stands for
    opset_floor: int = 1

    @property
    def opset(self) -> int:
        """The opset export-gelu emits for this target."""
        return min(self.opset_ceiling, EXPORT_OPSET_MAX)

    @property
    def has_gelu_op(self) -> bool:
        return "Gelu" in self.ops

    @property
    def plugin_usable(self) -> bool:
        return self.gelu_plugin in ("yes", "deprecated")

    @property
    def lacks(self) -> frozenset[str]:
        """Ops some TensorRT parser knows that this target does not parse."""
        if self.runtime != "trt":
            return frozenset()
        return frozenset(parser_ops.PARSER_OPS) - self.ops

    def supports(self, op: str) -> bool:
        """Whether a default-domain op type parses here (opset permitting): for TensorRT, a
        set lookup in the parser's importers; ONNX and ORT targets are not judged by op."""
        return self.runtime != "trt" or op in self.ops

    def refusal(self, op: str) -> str | None:
        """Why this target refuses an op type, in words, or None if it takes it."""
        if self.supports(op):
            return None
        if self.runtime == "trt":
            return parser_ops.refusal(op, self.trt_version) or f"not at opset {self.opset}"
        return None

    def at_opset(self, opset: int) -> TargetProfile:
        """This target capped at `opset` (`--opset` on an ONNX input): no `Gelu` below 20."""
        if opset >= self.opset_ceiling:
            return self
        ops = self.ops - {"Gelu"} if opset < 20 else self.ops
        lowering = ("primitives" if self.gelu_lowering == "onnx_gelu" and "Gelu" not in ops
                    else self.gelu_lowering)
        return replace(self, opset_ceiling=opset, ops=ops, gelu_lowering=lowering)


def trt_profile(version: str, name: str | None = None) -> TargetProfile:
    """The profile of TensorRT `version` exactly ('8.2.3'), built from the parser's tables."""
    opsets = parser_ops.opset_range(version)
    ops = parser_ops.imported_ops(version)
    strongly_typed = in_range(version, STRONGLY_TYPED_SINCE)
    return TargetProfile(
        name=name or f"trt{version}",
        runtime="trt",
        opset_ceiling=opsets.ceiling,
        opset_floor=opsets.floor,
        ops=ops,
        gelu_plugin=plugin_support(version).status,
        precision_api="strongly_typed" if strongly_typed else "builder_flags",
        precisions=("fp32", "fp16", "bf16") if in_range(version, BF16_SINCE) else ("fp32", "fp16"),
        gelu_lowering="onnx_gelu" if "Gelu" in ops else "primitives",
        trt_version=version,
    )


#: One profile per TensorRT line, standing for the line's first release.
TRT_PROFILES: tuple[TargetProfile, ...] = tuple(trt_profile(v, n) for n, v in TRT_LINES)

_ALL_ONNX_OPS = EMITTED_OPS | frozenset(parser_ops.PARSER_OPS)

PROFILES: dict[str, TargetProfile] = {
    "onnx": TargetProfile("onnx", "onnx", 20, _ALL_ONNX_OPS, gelu_lowering="onnx_gelu",
                          precisions=("fp32", "fp16", "bf16")),
    "ort": TargetProfile("ort", "ort", 20, _ALL_ONNX_OPS, gelu_lowering="ort_contrib",
                         precisions=("fp32", "fp16")),
    **{p.name: p for p in TRT_PROFILES},
}

#: The target names to offer (help text, test matrix); exact versions ('trt8.2.3') too.
TARGET_NAMES: tuple[str, ...] = ("onnx", "ort", "trt", *(p.name for p in TRT_PROFILES))

_EXACT = re.compile(r"trt(\d+(?:\.\d+){0,2})")


def trt_takers(op: str) -> list[str]:
    """Names of the named TensorRT profiles that parse `op`."""
    return [p.name for p in TRT_PROFILES if p.supports(op)]


def installed_tensorrt_version() -> str | None:
    """The version string of an importable tensorrt, else None (never raises)."""
    try:
        import tensorrt
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None
    return str(getattr(tensorrt, "__version__", "")) or None


def profile_for_trt_version(version: str) -> TargetProfile:
    """The newest named profile not newer than a TensorRT version string like '8.6.1'."""
    key = version_key(version)
    older = [p for p in TRT_PROFILES if version_key(p.trt_version) <= key]
    return older[-1] if older else TRT_PROFILES[0]


def _short(version: str) -> str:
    """'10.13.0.35' → '10.13', '8.2.3' → '8.2.3', '9' → '9.0'."""
    major, minor, patch = version_key(version)
    return f"{major}.{minor}.{patch}" if patch else f"{major}.{minor}"


def known_version(version: str) -> bool:
    """Whether the parser data covers TensorRT `version` (7.0 <= version < 12)."""
    key = version_key(version)
    return version_key(parser_ops.KNOWN_SINCE) <= key < version_key(parser_ops.KNOWN_BEFORE)


@lru_cache(maxsize=64)
def profile_for_version(version: str) -> TargetProfile:
    """The profile of exactly TensorRT `version`: the named one when `version` is the release
    a named profile stands for ('9.0.0' → trt9), else one of its own ('8.2.3' → trt8.2.3)."""
    short = _short(version)
    for p in TRT_PROFILES:
        if version_key(p.trt_version) == version_key(short):
            return p
    return trt_profile(short)


def resolve_profile(name: str) -> TargetProfile:
    """A target name ('onnx', 'trt8.6', 'trt8.2.3') as a profile; exit 2 when unknown."""
    from export_gelu.errors import BadInputError

    if name in PROFILES:
        return PROFILES[name]
    exact = _EXACT.fullmatch(name)
    if exact and name != "trt":
        if not known_version(exact.group(1)):
            raise BadInputError(
                f"target {name!r}: TensorRT {exact.group(1)} is outside the versions export-gelu "
                f"knows ({parser_ops.KNOWN_SINCE} to 11.x)")
        if not released_line(exact.group(1)):
            near = [f"trt{v}" for v in nearest_released(exact.group(1))]
            why = ("was never released (the releases either side: " + " and ".join(near) + ")"
                   if len(near) == 2 else f"is newer than the newest release known ({near[0]})")
            raise BadInputError(
                f"target {name!r}: TensorRT {_short(exact.group(1))} {why}; name the "
                "released version your device runs (`trtexec --version` or `dpkg -l | grep "
                "nvinfer` shows it)")
        return profile_for_version(exact.group(1))
    raise BadInputError(f"unknown target {name!r}; choose one of: {', '.join(TARGET_NAMES)}, "
                        "or trtX.Y[.Z] for an exact TensorRT version")


def resolve_target(name: str) -> tuple[TargetProfile, str]:
    """Resolve a target name to a profile, with a sentence saying how it was chosen."""
    if name == "trt":
        version = installed_tensorrt_version()
        if version and known_version(version):
            prof = profile_for_version(version)
            return prof, f"trt → {prof.name} (installed tensorrt {version})"
        if version:
            prof = profile_for_trt_version(version)
            return prof, (f"trt → {prof.name} (installed tensorrt {version} is outside the "
                          f"versions export-gelu knows; the nearest is used)")
        prof = TRT_PROFILES[-1]
        return prof, f"trt → {prof.name} (tensorrt not installed; newest profile)"
    prof = resolve_profile(name)
    return prof, name if prof.name == name else f"{name} → {prof.name}"
