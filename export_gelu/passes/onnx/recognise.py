"""Canonicalize: find every GELU in a graph, however it is written, as one `Match` record.

Three sources, tried in this order:
1. GELU ops already in the graph: ONNX `Gelu` (opset 20), `com.microsoft` `Gelu`,
   `FastGelu`, `BiasGelu`, `QuickGelu`, and the TensorRT plugin `CustomGeluPluginDynamic`.
2. Exporter shapes derived by exporting the reference formulas (`exporter_shapes.py`),
   matched with onnx-graphsurgeon's `GraphPattern` (`patterns.py`): fixed operand order,
   literals checked with the formula tolerance; these name the exporter that made them.
3. The formulas of `formulas.py` (derived from `passes/gelu_catalogue.py`) on expression
   trees (`expr.py`): every other spelling — commuted operands, TF's `Mul(0.7071)`,
   Megatron/Bloom/gelu_fast, erfc written with `Erf`, Cast islands.

Each site is a `Match` (`match.py`, re-exported here).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from export_gelu.passes.onnx.expr import TreeBuilder
from export_gelu.passes.onnx.formulas import QUICK_ALPHA, match_formula, root_ops
from export_gelu.passes.onnx.match import Match
from export_gelu.passes.onnx.patterns import exporter_shape_matches
from export_gelu.passes.onnx.view import DEFAULT_DOMAINS, GraphView
from export_gelu.trt_parser.plugin import TYPE_IDS, bias_as_read

MS_DOMAIN = "com.microsoft"
PLUGIN_OP = "CustomGeluPluginDynamic"
__all__ = ["Match", "MS_DOMAIN", "PLUGIN_OP", "existing_op_match", "formula_matches",
           "find_matches", "bias_to_fold", "gemm_fusion_takes"]


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def plugin_bias(node: onnx.NodeProto) -> np.ndarray | None:
    """A plugin node's bias as the plugin reads it (per `type_id`), None when it has none.

    Raises ValueError for a node the plugin cannot run (no or another `type_id`, a bias it
    would read past).
    """
    type_id = _attr(node, "type_id")
    if type_id is None:
        raise ValueError("no type_id attribute (the creator refuses it: invalid typeId -1)")
    tensor = _attr(node, "bias")
    if tensor is None:
        if int(type_id) not in TYPE_IDS:  # type: ignore[call-overload]
            raise ValueError(f"type_id {type_id}: the plugin runs float32 (0) and float16 (1)")
        return None
    return bias_as_read(numpy_helper.to_array(tensor), int(type_id))  # type: ignore[call-overload]


def existing_op_match(node: onnx.NodeProto) -> Match | None:
    """A GELU op already in the graph, as a Match (None for anything else)."""
    op, domain = node.op_type, node.domain
    ins = [i for i in node.input]
    if not ins or not ins[0] or len(node.output) != 1:
        return None
    bias = ins[1] if len(ins) > 1 and ins[1] else None

    def make(kind: str, shape: str, **kw: object) -> Match:
        return Match(kind, shape, ins[0], node.output[0], [node.name], node.name, **kw)

    one_input = op in ("Gelu", "QuickGelu") and (domain == MS_DOMAIN or
                                                 (domain in DEFAULT_DOMAINS and op == "Gelu"))
    if one_input and len([i for i in ins if i]) > 1:
        from export_gelu.errors import BadInputError

        shown = f"{domain + ' ' if domain else ''}{op}"
        raise BadInputError(f"node {node.name or node.output[0]!r}: {shown} takes one input, "
                            f"this one has {len(ins)} ({', '.join(ins)}); a malformed GELU "
                            "op is not rewritten (ONNX Runtime would refuse it as well)")

    if domain in DEFAULT_DOMAINS and op == "Gelu":
        approx = _attr(node, "approximate", b"none")
        approx = approx.decode() if isinstance(approx, bytes) else str(approx)
        return make("tanh" if approx == "tanh" else "exact", f"ONNX Gelu(approximate={approx})")
    if domain == MS_DOMAIN and op == "Gelu":
        return make("exact", "com.microsoft Gelu")
    if domain == MS_DOMAIN and op == "BiasGelu" and bias:
        return make("exact", "com.microsoft BiasGelu", bias=bias)
    if domain == MS_DOMAIN and op == "FastGelu":
        return make("tanh", "com.microsoft FastGelu", bias=bias)
    if domain == MS_DOMAIN and op == "QuickGelu":
        alpha = float(_attr(node, "alpha", 1.702))  # type: ignore[arg-type]
        if abs(alpha - QUICK_ALPHA) > 1e-4 * QUICK_ALPHA:
            return None  # x·σ(αx) with another α: not a QuickGELU site
        return make("quick", "com.microsoft QuickGelu")
    if op == PLUGIN_OP:
        try:
            values = plugin_bias(node)
        except ValueError:
            return None  # a node the plugin cannot run: left for the runtime to refuse
        return make("tanh", f"TensorRT {PLUGIN_OP} (tanh)", bias_values=values)
    return None


def formula_matches(view: GraphView, claimed: set[str]) -> list[Match]:
    """GELU formulas written as primitive ops, outermost first; skips claimed nodes."""
    builder = TreeBuilder(view)
    found: list[Match] = []
    ops = root_ops()
    roots = [n for n in reversed(view.model.graph.node)
             if n.op_type in ops and n.domain in DEFAULT_DOMAINS and len(n.output) == 1]
    for root in roots:
        if root.name in claimed:
            continue
        tree = builder.build(root)
        if any(n in claimed for n in tree.nodes):
            continue
        hit = match_formula(tree.expr)
        if hit is None:
            continue
        rule, leaf = hit
        features = set(tree.features)
        if "Pow" not in features and rule.kind == "tanh" and "x³" in rule.name:
            features.add("x*x*x")
        found.append(Match(rule.kind, rule.name, leaf.tensor, root.output[0], list(tree.nodes),
                           root.name, features=features))
        claimed.update(tree.nodes)
    return found


def find_matches(view: GraphView) -> list[Match]:
    """Every GELU site in the graph, in graph order."""
    claimed: set[str] = set()
    matches: list[Match] = []
    for node in view.model.graph.node:
        m = existing_op_match(node)
        if m is not None:
            matches.append(m)
            claimed.add(node.name)
    matches += exporter_shape_matches(view, claimed)
    matches += formula_matches(view, claimed)
    matches.sort(key=lambda m: view.order[m.root])
    return matches


def _graph_input_bias(view: GraphView, m: Match, bias: str, last_dim: int) -> bool:
    """True when `bias` is a rank-1 graph input of length `last_dim` in the site's own type.

    ONNX Runtime's online BiasGelu fusion and onnxscript's take any rank-1 tensor as the bias
    (docs/onnxruntime.md); an op that takes the bias as an input reads it at run time.
    """
    if bias not in view.graph_inputs:
        return False
    bt, out = view.type(bias), view.type(m.output)
    return (bt is not None and bt.shape == (last_dim,) and out is not None
            and out.elem_type == bt.elem_type)


def bias_to_fold(view: GraphView, m: Match,
                 graph_input_bias: bool = False) -> tuple[str, str, str] | None:
    """(Add node, other input, bias) when `m.x = Add(t, bias)` can be folded into the GELU op.

    The bias must be a constant vector over the last axis of `t` (shape [E] or [1,…,1,E]),
    or, with `graph_input_bias` (an op that takes the bias as an input), a rank-1 graph input
    [E]; `t` must already have x's shape (the Add broadcasts only the bias), and x must have
    no user but this site.
    """
    if m.has_bias:
        return None
    add = view.producer.get(m.x)
    if add is None or add.op_type != "Add" or add.domain not in DEFAULT_DOMAINS:
        return None
    if view.users(m.x) != sum(1 for c in view.consumers.get(m.x, ()) if c.name in m.nodes) \
            or m.x in view.graph_outputs or m.x in view.outer_reads:
        return None
    xt = view.type(m.x)
    if xt is None or xt.last_dim is None:
        return None
    for bias, other in ((add.input[1], add.input[0]), (add.input[0], add.input[1])):
        if view.is_constant(other):
            continue
        if not view.is_constant(bias):
            if graph_input_bias and _graph_input_bias(view, m, bias, xt.last_dim) \
                    and view.type(other) is not None and view.type(other).shape == xt.shape:
                return add.name, other, bias
            continue
        bt, ot = view.type(bias), view.type(other)
        if bt is None or ot is None or bt.shape is None or ot.shape != xt.shape:
            continue
        if bt.elem_type != xt.elem_type or not bt.shape:
            continue
        if bt.shape[-1] == xt.last_dim and all(d == 1 for d in bt.shape[:-1]):
            return add.name, other, bias
    return None


_GEMM_ELEM_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def gemm_fusion_takes(view: GraphView, add: str, other: str, bias: str) -> bool:
    """True when ONNX Runtime's MatMul+Add→Gemm fusion would take bias Add `add`.

    That fusion (a basic-level session transform, before its BiasGelu fusion) needs: `other`
    is a MatMul's output with no other use; B is 2-D; A is 2-D, or fully static with B's
    dims known (it inserts Reshapes); the bias is [N] (or [1, N] when A is 2-D); all of one
    float type. Folding such a bias into BiasGelu/FastGelu would cost the Gemm its bias
    epilogue and the GELU op a full-size scratch buffer: measured 1.5% slower on an erf
    Linear→GELU→Linear stack (benchmarks/gelu_bound.py).
    """
    matmul = view.producer.get(other)
    if matmul is None or matmul.op_type != "MatMul" or matmul.domain not in DEFAULT_DOMAINS:
        return False
    if view.users(other) != 1 or len(matmul.input) != 2:
        return False
    a, b, c = (view.type(t) for t in (matmul.input[0], matmul.input[1], bias))
    out = view.type(view.nodes[add].output[0])
    if None in (a, b, c, out) or a.shape is None or b.shape is None or c.shape is None:
        return False
    if len({a.elem_type, b.elem_type, c.elem_type, out.elem_type}) != 1 \
            or a.elem_type not in _GEMM_ELEM_TYPES or len(b.shape) != 2:
        return False
    n = b.shape[1]
    if len(a.shape) == 2:
        return isinstance(n, int) and tuple(c.shape) in ((n,), (1, n))
    static = all(isinstance(d, int) for d in a.shape) and all(isinstance(d, int) for d in b.shape)
    return static and tuple(c.shape) == (n,)
