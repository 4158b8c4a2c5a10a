"""Static compatibility check: would a target parse this ONNX graph, and if not, why not."""

from __future__ import annotations

from collections import Counter

import onnx

from export_gelu.targets import TargetProfile

#: Ops whose presence decides whether an old runtime takes a graph (KNOWLEDGE.md §5).
VERSIONED_OPS = ("Gelu", "LayerNormalization", "Einsum")
PLUGIN_OP = "CustomGeluPluginDynamic"


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    """Node counts by op type (prefixed with the domain when it is not the default one)."""
    counts: Counter[str] = Counter()
    for node in model.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        counts[key] += 1
    return counts


def model_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 0


def incompatibilities(model: onnx.ModelProto, profile: TargetProfile) -> list[str]:
    """Reasons `profile` would reject `model`; empty when it should parse as is."""
    reasons: list[str] = []
    opset = model_opset(model)
    if opset > profile.opset_ceiling:
        reasons.append(f"opset {opset} above ceiling {profile.opset_ceiling}")
    counts = op_counts(model)
    for op in VERSIONED_OPS:
        if counts.get(op) and op not in profile.ops:
            reasons.append(f"op {op} unsupported")
    plugin = sum(n for k, n in counts.items() if k.split(".")[-1] == PLUGIN_OP)
    if plugin:
        if profile.runtime != "trt":
            reasons.append(f"{PLUGIN_OP} is a TensorRT plugin; {profile.name} cannot run it")
        elif not profile.plugin_usable:
            reasons.append(f"plugin {PLUGIN_OP} {profile.gelu_plugin} in {profile.name}")
    foreign = sorted(k for k in counts if "." in k and not k.endswith(PLUGIN_OP))
    if foreign and profile.runtime != "ort":
        reasons.append(f"ops from a non-standard domain: {', '.join(foreign)}")
    return reasons
