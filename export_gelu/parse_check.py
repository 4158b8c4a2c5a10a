"""Static compatibility check: would a target parse this ONNX graph, and if not, why not.

Reads only the graph and the target profiles (`export_gelu.targets`, built from the TensorRT
parser's tables in `export_gelu.trt_parser`), so it runs anywhere, without tensorrt or a GPU.
The per-op check is one set lookup per distinct op type, not per node. Subgraphs, local
functions and the TensorRT restriction detectors are read from the one graph type of
`export_gelu.graph` (onnx-graphsurgeon's `gs.Graph`), loaded once per call and only when
needed.
"""

from __future__ import annotations

from collections import Counter

import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.targets import PLUGIN_OP, PROFILES, TargetProfile, trt_takers

#: Ops whose presence most often decides whether an old runtime takes a graph.
VERSIONED_OPS = ("Gelu", "LayerNormalization", "Einsum")
_DEFAULT_DOMAINS = ("", "ai.onnx")

__all__ = ["PLUGIN_OP", "VERSIONED_OPS", "op_counts", "model_opset", "incompatibilities",
           "compatibility_table"]


def _key(op: str, domain: str | None) -> str:
    return op if (domain or "") in _DEFAULT_DOMAINS else f"{domain}.{op}"


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    """Node counts of the main graph by op type (prefixed with the domain when it is not the
    default one)."""
    return Counter(_key(node.op_type, node.domain) for node in model.graph.node)


def _all_op_counts(model: onnx.ModelProto, graph: gs.Graph | None = None) -> Counter[str]:
    """Node counts of the whole model: subgraphs and local functions too."""
    if graph is None and not G.has_subgraphs(model):
        return op_counts(model)
    if graph is None:
        with G.opened(model) as loaded:
            return _all_op_counts(model, loaded)
    counts = Counter(_key(n.op, n.domain) for n in G.walk(graph))
    for fn in graph.functions:
        counts.update(_key(n.op, n.domain) for n in G.walk(fn))
    for fn in graph.functions:  # calls to local functions are not ops a runtime must know
        counts.pop(_key(fn.name, fn.domain), None)
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
                      counts: Counter[str] | None = None,
                      graph: gs.Graph | None = None) -> list[str]:
    """Reasons `profile` would reject `model`; empty when it should parse as is.

    `counts` (from `_all_op_counts`) and `graph` (`model` loaded, or a graph the passes
    edited and did not save: then it is what is judged) let callers judging many profiles
    count nodes and load the graph once.
    """
    reasons: list[str] = []
    opset = G.opset(graph) if graph is not None else model_opset(model)
    opset_reason = opset_problem(opset, profile)
    if opset_reason:
        reasons.append(opset_reason)
    counts = counts if counts is not None else _all_op_counts(model, graph)
    for op in sorted(k for k in counts if "." not in k and k != PLUGIN_OP):
        if not profile.supports(op):
            reasons.append(_op_reason(op, profile))
    plugin = sum(n for k, n in counts.items() if k.split(".")[-1] == PLUGIN_OP)
    if plugin:
        if profile.runtime != "trt":
            reasons.append(f"{PLUGIN_OP} is a TensorRT plugin; {profile.name} cannot run it")
        elif not profile.plugin_usable:
            reasons.append(f"plugin {PLUGIN_OP} {profile.gelu_plugin} in {profile.name}")
        else:
            reasons.extend(_biasless_plugin_reason(model, graph, profile))
    foreign = sorted(k for k in counts if "." in k and not k.endswith(PLUGIN_OP))
    if foreign and profile.runtime != "ort":
        reasons.append(f"ops from a non-standard domain: {', '.join(foreign)}")
    if profile.runtime == "trt":
        from export_gelu.trt_parser.restrictions import find_hits

        hits = find_hits(graph if graph is not None else model, profile.trt_version)
        reasons.extend(h.message(profile.trt_version) for h in hits)
    return reasons


def _biasless_plugin_reason(model: onnx.ModelProto, graph: gs.Graph | None,
                            profile: TargetProfile) -> list[str]:
    """A plugin node without a `bias` on a TensorRT version whose kernel then divides by zero
    (8.6 to 10.12: docs/tensorrt-plugin.md), as a reason; else nothing."""
    from export_gelu.trt_parser.plugin import BIASLESS_CRASH, biasless_crashes

    if not biasless_crashes(profile.trt_version):
        return []
    if graph is not None:
        names = [n.name for g in G.graphs(graph) for n in g.nodes
                 if n.op == PLUGIN_OP and not _has_bias(n.attrs.get("bias"))]
    else:
        names = [n.name for n in G.all_node_protos(model.graph)
                 if n.op_type == PLUGIN_OP and not any(
                     a.name == "bias" and _has_bias(a.t) for a in n.attribute)]
    if not names:
        return []
    since, fixed = BIASLESS_CRASH
    shown = ", ".join(repr(n) for n in names[:3]) + (" …" if len(names) > 3 else "")
    return [f"{len(names)} {PLUGIN_OP} node(s) without a bias ({shown}): the plugin's kernel "
            f"divides by zero without one on TensorRT {since} to {_before(fixed)} (fixed in "
            f"{fixed}); give each a bias (zeros over the last axis), as export-gelu "
            "--gelu plugin writes it"]


def _before(fixed: str) -> str:
    """'10.12' for '10.13': the last minor release before a fix."""
    major, minor = fixed.split(".")[:2]
    return f"{major}.{int(minor) - 1}" if int(minor) > 0 else f"{int(major) - 1}.x"


def _has_bias(value: object) -> bool:
    """A `bias` attribute (a TensorProto or graphsurgeon's array) with at least one value."""
    if value is None:
        return False
    if isinstance(value, onnx.TensorProto):
        return len(value.dims) == 0 or all(d > 0 for d in value.dims)
    size = getattr(getattr(value, "values", value), "size", None)
    return bool(size) if size is not None else True



def compatibility_table(model: onnx.ModelProto, profiles: list[TargetProfile] | None = None,
                        graph: gs.Graph | None = None) -> dict[str, list[str]]:
    """`incompatibilities` for every profile (all targets by default), keyed by name;
    `graph`: `model` already loaded (else it is loaded once, when a check needs it)."""
    from export_gelu.trt_parser.restrictions import could_hit

    chosen = profiles if profiles is not None else list(PROFILES.values())
    needs_graph = graph is None and (G.has_subgraphs(model) or any(
        p.runtime == "trt" and could_hit(model, p.trt_version) for p in chosen))
    if needs_graph:
        with G.opened(model) as loaded:
            return compatibility_table(model, chosen, loaded)
    counts = _all_op_counts(model, graph)
    return {p.name: incompatibilities(model, p, counts, graph) for p in chosen}


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


def opset_takers_text(op: str, opset: int) -> str:
    """The targets whose opset reaches `opset` and that take `op` (the way out of a "needs
    opset N" refusal): 'onnx, ort, trt8.5–trt11'."""
    from export_gelu.targets import PROFILES, TRT_PROFILES

    plain = [n for n, p in PROFILES.items() if p.runtime != "trt" and p.opset_ceiling >= opset]
    trt = [p.name for p in TRT_PROFILES if p.opset_ceiling >= opset and p.supports(op)]
    return ", ".join(plain + ([format_targets(trt)] if trt else []))


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
