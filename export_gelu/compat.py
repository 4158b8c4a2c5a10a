"""Static compatibility check: would a target parse this ONNX graph, and if not, why not.

Reads only the graph and the target profiles (`export_gelu.targets`), so it runs anywhere,
without tensorrt or a GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import onnx

from export_gelu.targets import PLUGIN_OP, PROFILES, TRT_OP_SINCE, TargetProfile, trt_takers

#: Ops whose presence most often decides whether an old runtime takes a graph (KNOWLEDGE §5).
VERSIONED_OPS = ("Gelu", "LayerNormalization", "Einsum")
_DEFAULT_DOMAINS = ("", "ai.onnx")

__all__ = ["PLUGIN_OP", "VERSIONED_OPS", "op_counts", "model_opset", "incompatibilities",
           "compatibility_table", "iter_nodes"]


def iter_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of `graph`, including those in If/Loop/Scan bodies."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from iter_nodes(g)


def _key(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain in _DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    """Node counts by op type (prefixed with the domain when it is not the default one)."""
    return Counter(_key(node) for node in model.graph.node)


def _all_op_counts(model: onnx.ModelProto) -> Counter[str]:
    counts = Counter(_key(n) for n in iter_nodes(model.graph))
    for fn in model.functions:
        counts.update(_key(n) for n in fn.node)
    for fn in model.functions:  # calls to local functions are not ops a runtime must know
        counts.pop(f"{fn.domain}.{fn.name}" if fn.domain not in _DEFAULT_DOMAINS else fn.name,
                   None)
    return counts


def model_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in _DEFAULT_DOMAINS:
            return int(imp.version)
    return 0


def _op_reason(op: str, profile: TargetProfile) -> str:
    since = TRT_OP_SINCE.get(op)
    if profile.runtime == "trt" and since:
        return f"op {op} unsupported (TensorRT parses it from {since})"
    return f"op {op} unsupported"


def incompatibilities(model: onnx.ModelProto, profile: TargetProfile) -> list[str]:
    """Reasons `profile` would reject `model`; empty when it should parse as is."""
    reasons: list[str] = []
    opset = model_opset(model)
    if opset > profile.opset_ceiling:
        reasons.append(f"opset {opset} above ceiling {profile.opset_ceiling}")
    counts = _all_op_counts(model)
    for op in sorted(k for k in counts if "." not in k):
        if not profile.supports(op):
            reasons.append(_op_reason(op, profile))
    plugin = sum(n for k, n in counts.items() if k.split(".")[-1] == PLUGIN_OP)
    if plugin:
        if profile.runtime != "trt":
            reasons.append(f"{PLUGIN_OP} is a TensorRT plugin; {profile.name} cannot run it")
        elif not profile.plugin_usable:
            reasons.append(f"plugin {PLUGIN_OP} {profile.gelu_plugin} in {profile.name}")
    foreign = sorted(k for k in counts if "." in k and not k.endswith(PLUGIN_OP))
    if foreign and profile.runtime != "ort":
        reasons.append(f"ops from a non-standard domain: {', '.join(foreign)}")
    if profile.runtime == "trt":
        from export_gelu.trt_parser.restrictions import find_hits

        reasons.extend(h.message(profile.trt_version) for h in find_hits(model,
                                                                          profile.trt_version))
    return reasons


def compatibility_table(model: onnx.ModelProto,
                        profiles: list[TargetProfile] | None = None) -> dict[str, list[str]]:
    """`incompatibilities` for every profile (all targets by default), keyed by name."""
    chosen = profiles if profiles is not None else list(PROFILES.values())
    return {p.name: incompatibilities(model, p) for p in chosen}


def takers_text(op: str) -> str:
    """'trt8.2, trt8.4, …' — the TensorRT targets that parse `op`, for error messages."""
    names = trt_takers(op)
    return ", ".join(names) if names else "no TensorRT version"


def format_targets(names: list[str]) -> str:
    """TensorRT profile names as runs: ['trt8.2', 'trt8.4', 'trt9'] → 'trt8.2–trt9'."""
    from export_gelu.targets import TRT_PROFILES

    order = [p.name for p in TRT_PROFILES]
    runs: list[list[str]] = []
    for name in sorted(names, key=lambda n: order.index(n) if n in order else len(order)):
        if runs and name in order and runs[-1][-1] in order and \
                order.index(name) == order.index(runs[-1][-1]) + 1:
            runs[-1].append(name)
        else:
            runs.append([name])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs) or "none"
