"""Static compatibility check: would a target parse this ONNX graph, and if not, why not.

Reads only the graph and the target profiles (`export_gelu.targets`, built from the TensorRT
parser's tables in `export_gelu.trt_parser`), so it runs anywhere, without tensorrt or a GPU.
The per-op check is one set lookup per distinct op type, not per node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import onnx

from export_gelu.targets import PLUGIN_OP, PROFILES, TargetProfile, trt_takers

#: Ops whose presence most often decides whether an old runtime takes a graph.
VERSIONED_OPS = ("Gelu", "LayerNormalization", "Einsum")
_DEFAULT_DOMAINS = ("", "ai.onnx")

__all__ = ["PLUGIN_OP", "VERSIONED_OPS", "op_counts", "model_opset", "incompatibilities",
           "compatibility_table", "iter_nodes"]


#: Default-domain ops that carry subgraphs; only these (and other domains' ops) are searched.
_SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def iter_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of `graph`, including those in If/Loop/Scan bodies."""
    for node in graph.node:
        yield node
        if node.op_type not in _SUBGRAPH_OPS and node.domain in _DEFAULT_DOMAINS:
            continue
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
    why = profile.refusal(op)
    return f"op {op} unsupported ({why})" if why else f"op {op} unsupported"


def opset_problem(opset: int, profile: TargetProfile) -> str | None:
    """Why `profile` refuses a graph of default-domain `opset`, or None."""
    if opset > profile.opset_ceiling:
        return f"opset {opset} above ceiling {profile.opset_ceiling}"
    if profile.runtime == "trt" and opset < profile.opset_floor:
        return (f"opset {opset} below floor {profile.opset_floor} (TensorRT "
                f"{profile.trt_version} takes opset {profile.opset_floor} to "
                f"{profile.opset_ceiling})")
    return None


def incompatibilities(model: onnx.ModelProto, profile: TargetProfile,
                      counts: Counter[str] | None = None) -> list[str]:
    """Reasons `profile` would reject `model`; empty when it should parse as is.

    `counts` (from `_all_op_counts`) lets callers judging many profiles count nodes once.
    """
    reasons: list[str] = []
    opset_reason = opset_problem(model_opset(model), profile)
    if opset_reason:
        reasons.append(opset_reason)
    counts = counts if counts is not None else _all_op_counts(model)
    for op in sorted(k for k in counts if "." not in k and k != PLUGIN_OP):
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
    counts = _all_op_counts(model)
    return {p.name: incompatibilities(model, p, counts) for p in chosen}


def takers_text(op: str) -> str:
    """The TensorRT versions that parse `op`, for messages: 'TensorRT 9.1 and newer: trt9.1,
    trt10, trt11'; 'no TensorRT version' when none does."""
    from export_gelu.trt_parser.ops import PARSER_OPS, first_version

    since = first_version(op)
    if since is None:
        return "no TensorRT version" if op in PARSER_OPS else \
            "no TensorRT version (no parser knows the op)"
    names = trt_takers(op)
    if not any(PROFILES[n].trt_version == since for n in names):
        names.insert(0, f"trt{since}")
    return f"TensorRT {since} and newer: {', '.join(names)}"


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
