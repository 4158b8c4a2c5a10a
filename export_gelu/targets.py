"""Target profiles as data (KNOWLEDGE.md §5) and how a target name resolves to one.

A profile says what a runtime version accepts: its opset ceiling, which ops that matter
exist there, whether the GELU plugin ships, how precision is requested, and how GELU should
be lowered. The export pipeline, the ONNX passes and the static compatibility check
(`export_gelu.compat`) all read these records; adding a target is adding a record.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

#: The highest opset the exporters here produce reliably; a ceiling above it is not used.
EXPORT_OPSET_MAX = 20

#: Ops the TensorRT ONNX parser gained after 7.0, with the first release that parses each
#: (KNOWLEDGE.md §5 for Gelu / LayerNormalization / Einsum; the onnx-tensorrt changelog for
#: the rest). An op absent here is taken to parse on every version its opset allows.
TRT_OP_SINCE: dict[str, str] = {
    # 8.0 (added to the parser after the 7.2.1 release)
    "GatherElements": "8.0", "EyeLike": "8.0", "CumSum": "8.0", "Celu": "8.0",
    "LessOrEqual": "8.0", "GreaterOrEqual": "8.0", "LpNormalization": "8.0", "LpPool": "8.0",
    "ReverseSequence": "8.0",
    # 8.2
    "Einsum": "8.2", "IsNaN": "8.2", "GatherND": "8.2", "Scatter": "8.2",
    "ScatterElements": "8.2", "ScatterND": "8.2", "Sign": "8.2", "Round": "8.2",
    # 8.4
    "Shrink": "8.4", "Xor": "8.4",
    # 8.5
    "RandomNormal": "8.5", "MeanVarianceNormalization": "8.5", "RoiAlign": "8.5", "Mod": "8.5",
    "Trilu": "8.5", "GridSample": "8.5", "NonZero": "8.5",
    # 8.6
    "LayerNormalization": "8.6", "GroupNormalization": "8.6", "IsInf": "8.6",
    # 9, 10
    "Hardmax": "9", "Gelu": "10",
}

#: Ops export-gelu's own passes emit (GELU primitives, LayerNormalization expansion, attention
#: and IsNaN rewrites, opset adapters). Every TensorRT version here parses all of them.
EMITTED_OPS = frozenset({
    "Erf", "Tanh", "Pow", "Mul", "Add", "Sub", "Div", "Sigmoid", "Clip", "Sqrt", "Cast",
    "ReduceMean", "ReduceMax", "Not", "Equal", "Greater", "Softmax", "MatMul", "Transpose",
    "Reshape", "Slice", "Concat", "Identity", "Constant", "Shape", "Squeeze", "Unsqueeze",
    "Split",
})

#: The GELU plugin's op type (KNOWLEDGE.md §5).
PLUGIN_OP = "CustomGeluPluginDynamic"


@dataclass(frozen=True)
class TargetProfile:
    """What one runtime (and version) accepts, and how GELU should be lowered for it."""

    name: str
    runtime: str  # "onnx" | "ort" | "trt"
    opset_ceiling: int
    ops: frozenset[str] = field(default_factory=frozenset)  # ops that matter and exist here
    gelu_plugin: str = "none"  # none | unmappable | yes | deprecated | removed
    precision_api: str = "none"  # none | builder_flags | strongly_typed
    precisions: tuple[str, ...] = ("fp32", "fp16")
    gelu_lowering: str = "primitives"  # onnx_gelu | ort_contrib | primitives
    trt_version: str = ""

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
        """Versioned ops this target does not parse."""
        if self.runtime != "trt":
            return frozenset()
        return frozenset(op for op in TRT_OP_SINCE if op not in self.ops)

    def supports(self, op: str) -> bool:
        """Whether a default-domain op type parses here (opset permitting)."""
        return op not in self.lacks

    def at_opset(self, opset: int) -> TargetProfile:
        """This target capped at `opset` (`--opset` on an ONNX input): no `Gelu` below 20."""
        if opset >= self.opset_ceiling:
            return self
        ops = self.ops - {"Gelu"} if opset < 20 else self.ops
        lowering = ("primitives" if self.gelu_lowering == "onnx_gelu" and "Gelu" not in ops
                    else self.gelu_lowering)
        return replace(self, opset_ceiling=opset, ops=ops, gelu_lowering=lowering)


def _version_key(version: str) -> tuple[int, int]:
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]]
    return tuple((parts + [0, 0])[:2])  # type: ignore[return-value]


def _trt(version: str, ceiling: int, *, plugin: str, strongly_typed: bool = False,
         bf16: bool = False) -> TargetProfile:
    key = _version_key(version)
    ops = EMITTED_OPS | {op for op, since in TRT_OP_SINCE.items() if _version_key(since) <= key}
    return TargetProfile(
        name=f"trt{version}",
        runtime="trt",
        opset_ceiling=ceiling,
        ops=frozenset(ops),
        gelu_plugin=plugin,
        precision_api="strongly_typed" if strongly_typed else "builder_flags",
        precisions=("fp32", "fp16", "bf16") if bf16 else ("fp32", "fp16"),
        gelu_lowering="onnx_gelu" if "Gelu" in ops else "primitives",
        trt_version=version,
    )


#: TensorRT ONNX-parser facts, one record per version line (KNOWLEDGE.md §5). The 7.2 ceiling
#: is the conservative 11 (the 7.2.1 docs say 13); 10.15+ parses opset 24 but trt10 keeps 20.
TRT_PROFILES: tuple[TargetProfile, ...] = (
    _trt("7.0", 11, plugin="unmappable"),
    _trt("7.1", 11, plugin="yes"),
    _trt("7.2", 11, plugin="yes"),
    _trt("8.0", 13, plugin="yes"),
    _trt("8.2", 13, plugin="yes"),
    _trt("8.4", 17, plugin="yes"),
    _trt("8.5", 17, plugin="yes"),
    _trt("8.6", 17, plugin="yes"),
    _trt("9", 19, plugin="deprecated", bf16=True),
    _trt("10", 20, plugin="deprecated", bf16=True),
    _trt("11", 24, plugin="removed", strongly_typed=True, bf16=True),
)

_ALL_ONNX_OPS = EMITTED_OPS | frozenset(TRT_OP_SINCE)

PROFILES: dict[str, TargetProfile] = {
    "onnx": TargetProfile("onnx", "onnx", 20, _ALL_ONNX_OPS, gelu_lowering="onnx_gelu",
                          precisions=("fp32", "fp16", "bf16")),
    "ort": TargetProfile("ort", "ort", 20, _ALL_ONNX_OPS, gelu_lowering="ort_contrib",
                         precisions=("fp32", "fp16")),
    **{p.name: p for p in TRT_PROFILES},
}

TARGET_NAMES: tuple[str, ...] = ("onnx", "ort", "trt", *(p.name for p in TRT_PROFILES))


def trt_takers(op: str) -> list[str]:
    """Names of the TensorRT profiles that parse `op`."""
    return [p.name for p in TRT_PROFILES if p.supports(op)]


def installed_tensorrt_version() -> str | None:
    """The version string of an importable tensorrt, else None (never raises)."""
    try:
        import tensorrt  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None
    return str(getattr(tensorrt, "__version__", "")) or None


def profile_for_trt_version(version: str) -> TargetProfile:
    """The newest profile not newer than a TensorRT version string like '8.6.1'."""
    key = _version_key(version)
    older = [p for p in TRT_PROFILES if _version_key(p.trt_version) <= key]
    return older[-1] if older else TRT_PROFILES[0]


def resolve_target(name: str) -> tuple[TargetProfile, str]:
    """Resolve a target name to a profile, with a sentence saying how it was chosen."""
    if name == "trt":
        version = installed_tensorrt_version()
        if version:
            prof = profile_for_trt_version(version)
            if _version_key(version) < _version_key(TRT_PROFILES[0].trt_version):
                return prof, (f"trt → {prof.name} (installed tensorrt {version} is older than "
                              f"any profile; the oldest is used)")
            return prof, f"trt → {prof.name} (installed tensorrt {version})"
        prof = TRT_PROFILES[-1]
        return prof, f"trt → {prof.name} (tensorrt not installed; newest profile)"
    if name not in PROFILES:
        from export_gelu.errors import BadInputError

        raise BadInputError(
            f"unknown target {name!r}; choose one of: {', '.join(TARGET_NAMES)}"
        )
    return PROFILES[name], name
