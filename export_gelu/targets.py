"""Target profiles as data (KNOWLEDGE.md §5) and how a target name resolves to one."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: The highest opset the exporters here produce reliably; a ceiling above it is not used.
EXPORT_OPSET_MAX = 20


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


_BASE_TRT_OPS = frozenset({"Erf", "Tanh", "Pow", "Mul", "Add", "Div", "Sigmoid", "Clip"})


def _trt(version: str, ceiling: int, *, gelu: bool, layernorm: bool, einsum: bool,
         plugin: str, strongly_typed: bool = False, bf16: bool = False) -> TargetProfile:
    ops = set(_BASE_TRT_OPS)
    if gelu:
        ops.add("Gelu")
    if layernorm:
        ops.add("LayerNormalization")
    if einsum:
        ops.add("Einsum")
    return TargetProfile(
        name=f"trt{version}",
        runtime="trt",
        opset_ceiling=ceiling,
        ops=frozenset(ops),
        gelu_plugin=plugin,
        precision_api="strongly_typed" if strongly_typed else "builder_flags",
        precisions=("fp32", "fp16", "bf16") if bf16 else ("fp32", "fp16"),
        gelu_lowering="onnx_gelu" if gelu else "primitives",
        trt_version=version,
    )


#: TensorRT ONNX-parser facts, one record per version line (KNOWLEDGE.md §5).
TRT_PROFILES: tuple[TargetProfile, ...] = (
    _trt("7.0", 11, gelu=False, layernorm=False, einsum=False, plugin="unmappable"),
    _trt("7.1", 11, gelu=False, layernorm=False, einsum=False, plugin="yes"),
    _trt("7.2", 11, gelu=False, layernorm=False, einsum=False, plugin="yes"),
    _trt("8.0", 13, gelu=False, layernorm=False, einsum=False, plugin="yes"),
    _trt("8.2", 13, gelu=False, layernorm=False, einsum=True, plugin="yes"),
    _trt("8.4", 17, gelu=False, layernorm=False, einsum=True, plugin="yes"),
    _trt("8.5", 17, gelu=False, layernorm=False, einsum=True, plugin="yes"),
    _trt("8.6", 17, gelu=False, layernorm=True, einsum=True, plugin="yes"),
    _trt("9", 19, gelu=False, layernorm=True, einsum=True, plugin="deprecated", bf16=True),
    _trt("10", 20, gelu=True, layernorm=True, einsum=True, plugin="deprecated", bf16=True),
    _trt("11", 24, gelu=True, layernorm=True, einsum=True, plugin="removed",
         strongly_typed=True, bf16=True),
)

_ALL_ONNX_OPS = frozenset({"Gelu", "LayerNormalization", "Einsum"}) | _BASE_TRT_OPS

PROFILES: dict[str, TargetProfile] = {
    "onnx": TargetProfile("onnx", "onnx", 20, _ALL_ONNX_OPS, gelu_lowering="onnx_gelu",
                          precisions=("fp32", "fp16", "bf16")),
    "ort": TargetProfile("ort", "ort", 20, _ALL_ONNX_OPS, gelu_lowering="ort_contrib",
                         precisions=("fp32", "fp16")),
    **{p.name: p for p in TRT_PROFILES},
}

TARGET_NAMES: tuple[str, ...] = ("onnx", "ort", "trt", *(p.name for p in TRT_PROFILES))


def installed_tensorrt_version() -> str | None:
    """The version string of an importable tensorrt, else None (never raises)."""
    try:
        import tensorrt  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None
    return str(getattr(tensorrt, "__version__", "")) or None


def _version_key(version: str) -> tuple[int, int]:
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]]
    return tuple((parts + [0, 0])[:2])  # type: ignore[return-value]


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
            return prof, f"trt → {prof.name} (installed tensorrt {version})"
        prof = TRT_PROFILES[-1]
        return prof, f"trt → {prof.name} (tensorrt not installed; newest profile)"
    if name not in PROFILES:
        from export_gelu.errors import BadInputError

        raise BadInputError(
            f"unknown target {name!r}; choose one of: {', '.join(TARGET_NAMES)}"
        )
    return PROFILES[name], name
