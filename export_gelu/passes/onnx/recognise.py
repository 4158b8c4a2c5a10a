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

from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.passes.onnx.expr import build_tree
from export_gelu.passes.onnx.formulas import QUICK_ALPHA, match_formula, root_ops
from export_gelu.passes.onnx.match import Match
from export_gelu.passes.onnx.patterns import exporter_shape_matches
from export_gelu.trt_parser.plugin import TYPE_IDS, bias_as_read

MS_DOMAIN = "com.microsoft"
PLUGIN_OP = "CustomGeluPluginDynamic"
__all__ = ["Match", "MS_DOMAIN", "PLUGIN_OP", "existing_op_match", "formula_matches",
           "find_matches", "bias_to_fold", "folded_identities", "gemm_fusion_takes",
           "runtime_bias_note"]


def plugin_bias(node: gs.Node) -> np.ndarray | None:
    """A plugin node's bias as the plugin reads it (per `type_id`), None when it has none.

    Raises ValueError for a node the plugin cannot run (no or another `type_id`, a bias it
    would read past).
    """
    type_id = node.attrs.get("type_id")
    if type_id is None:
        raise ValueError("no type_id attribute (the creator refuses it: invalid typeId -1)")
    bias = G.attr_array(node, "bias")
    if bias is None:
        if int(type_id) not in TYPE_IDS:
            raise ValueError(f"type_id {type_id}: the plugin runs float32 (0) and float16 (1)")
        return None
    return bias_as_read(bias, int(type_id))


def existing_op_match(node: gs.Node) -> Match | None:
    """A GELU op already in the graph, as a Match (None for anything else)."""
    op, domain = node.op, node.domain or ""
    ins = list(node.inputs)
    if not ins or ins[0].is_empty() or len(node.outputs) != 1:
        return None
    bias = ins[1] if len(ins) > 1 and not ins[1].is_empty() else None

    def make(kind: str, shape: str, **kw: Any) -> Match:
        return Match(kind, shape, ins[0], node.outputs[0], [node], node, **kw)

    one_input = op in ("Gelu", "QuickGelu") and (domain == MS_DOMAIN or
                                                 (domain in G.DEFAULT_DOMAINS and op == "Gelu"))
    if one_input and len([i for i in ins if not i.is_empty()]) > 1:
        from export_gelu.errors import BadInputError

        shown = f"{domain + ' ' if domain else ''}{op}"
        names = [t.name for t in ins]
        raise BadInputError(f"node {node.name or node.outputs[0].name!r}: {shown} takes one "
                            f"input, this one has {len(ins)} ({', '.join(names)}); a malformed "
                            "GELU op is not rewritten (ONNX Runtime would refuse it as well)")

    if domain in G.DEFAULT_DOMAINS and op == "Gelu":
        approx = str(node.attrs.get("approximate", "none"))
        return make("tanh" if approx == "tanh" else "exact", f"ONNX Gelu(approximate={approx})")
    if domain == MS_DOMAIN and op == "Gelu":
        return make("exact", "com.microsoft Gelu")
    if domain == MS_DOMAIN and op == "BiasGelu" and bias is not None:
        return make("exact", "com.microsoft BiasGelu", bias=bias)
    if domain == MS_DOMAIN and op == "FastGelu":
        return make("tanh", "com.microsoft FastGelu", bias=bias)
    if domain == MS_DOMAIN and op == "QuickGelu":
        alpha = float(node.attrs.get("alpha", 1.702))
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


def formula_matches(graph: gs.Graph, claimed: set[int]) -> list[Match]:
    """GELU formulas written as primitive ops, outermost first; skips claimed nodes (ids)."""
    found: list[Match] = []
    ops = root_ops()
    roots = [n for n in reversed(graph.nodes)
             if n.op in ops and G.is_default(n) and len(n.outputs) == 1]
    for root in roots:
        if id(root) in claimed:
            continue
        tree = build_tree(graph, root)
        if any(id(n) in claimed for n in tree.nodes):
            continue
        hit = match_formula(tree.expr)
        if hit is None:
            continue
        rule, leaf = hit
        features = set(tree.features)
        if "Pow" not in features and rule.kind == "tanh" and "x³" in rule.name:
            features.add("x*x*x")
        found.append(Match(rule.kind, rule.name, leaf.tensor, root.outputs[0],
                           list(tree.nodes), root, features=features))
        claimed.update(id(n) for n in tree.nodes)
    return found


def find_matches(graph: gs.Graph) -> list[Match]:
    """Every GELU site in the graph, in graph order."""
    claimed: set[int] = set()
    matches: list[Match] = []
    for node in graph.nodes:
        m = existing_op_match(node)
        if m is not None:
            matches.append(m)
            claimed.add(id(node))
    matches += exporter_shape_matches(graph, claimed)
    matches += formula_matches(graph, claimed)
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    matches.sort(key=lambda m: order[id(m.root)])
    return matches


def _through_identity(tensor: gs.Tensor) -> gs.Tensor:
    """The tensor an `Identity` chain (an exporter's, or a test graph's before an Add) passes
    on unchanged; `tensor` itself when no Identity makes it."""
    for _ in range(8):
        node = G.producer(tensor)
        if node is None or node.op != "Identity" or not G.is_default(node) or not node.inputs:
            break
        tensor = node.inputs[0]
    return tensor


def folded_identities(graph: gs.Graph, add: gs.Node, bias: gs.Tensor) -> list[gs.Node]:
    """The Identity nodes between a folded bias Add and its constant `bias` that nothing else
    reads: they go with the Add."""
    chain: list[gs.Node] = []
    for tensor in add.inputs:
        while tensor is not bias:
            node = G.producer(tensor)
            if node is None or node.op != "Identity" or G.users(graph, tensor) != 1:
                break
            chain.append(node)
            tensor = node.inputs[0]
        if tensor is bias:
            return chain
        chain = []
    return []


def _constant_bias(graph: gs.Graph, bias: gs.Tensor, xt: G.TensorType) -> gs.Tensor | None:
    """The constant (initializer or `Constant` node, through Identity) that `bias` is, when it
    runs over the last axis of x: shape [E] or [1,…,1,E], in x's element type."""
    source = _through_identity(bias)
    if not G.is_constant(graph, source):
        return None
    bt = G.type_of(graph, source)
    if bt is None or bt.shape is None or not bt.shape or bt.elem_type != xt.elem_type:
        return None
    if bt.shape[-1] == xt.last_dim and all(d == 1 for d in bt.shape[:-1]):
        return source
    return None


def _runtime_bias(graph: gs.Graph, m: Match, bias: gs.Tensor, last_dim: int) -> bool:
    """True when `bias`, read at run time (a graph input, an Identity of one, any node's
    output), is rank 1 of length `last_dim` in the site's own type.

    ONNX Runtime's online BiasGelu fusion and onnxscript's take any rank-1 tensor as the bias
    (docs/onnxruntime.md); an op that takes the bias as an input reads it at run time.
    """
    bt, out = G.type_of(graph, bias), G.type_of(graph, m.output)
    return (bt is not None and bt.shape == (last_dim,) and out is not None
            and out.elem_type == bt.elem_type)


def runtime_bias_note(graph: gs.Graph, bias: gs.Tensor) -> str:
    """What the report says of a folded bias read at run time."""
    source = _through_identity(bias)
    if any(t is source for t in graph.inputs):
        return f"its bias {source.name} is a graph input, read at run time"
    return f"its bias {bias.name} is computed in the graph, read at run time"


def bias_to_fold(graph: gs.Graph, m: Match, runtime_bias: bool = False
                 ) -> tuple[gs.Node, gs.Tensor, gs.Tensor] | None:
    """(Add node, other input, bias) when `m.x = Add(t, bias)` can be folded into the GELU op.

    One rule for every form of the bias Add, as ONNX Runtime's BiasGelu fusion reads it: the
    bias is either operand (`Add(t, b)` or `Add(b, t)`), `t` the other; `t` has x's shape (the
    Add broadcasts only the bias) and x has no user but this site. The bias is a constant over
    the last axis of `t` ([E] or [1,…,1,E]; an initializer or a `Constant` node, seen through
    Identity nodes: the constant is returned), or, with `runtime_bias` (an op that takes the
    bias as an input), any tensor read at run time of shape [E] (a graph input, an Identity of
    one, a node's output: returned as the Add reads it).
    """
    if m.has_bias:
        return None
    add = G.producer(m.x)
    if add is None or add.op != "Add" or not G.is_default(add) or len(add.inputs) != 2:
        return None
    if G.users(graph, m.x) != sum(1 for c in G.consumers(m.x) if m.covers(c)):
        return None
    xt = G.type_of(graph, m.x)
    if xt is None or xt.last_dim is None:
        return None
    for bias, other in ((add.inputs[1], add.inputs[0]), (add.inputs[0], add.inputs[1])):
        if G.is_constant(graph, _through_identity(other)):
            continue
        ot = G.type_of(graph, other)
        if ot is None or ot.shape != xt.shape:
            continue
        constant = _constant_bias(graph, bias, xt)
        if constant is not None:
            return add, other, constant
        if (runtime_bias and not G.is_constant(graph, _through_identity(bias))
                and _runtime_bias(graph, m, bias, xt.last_dim)):
            return add, other, bias
    return None


_GEMM_ELEM_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def gemm_fusion_takes(graph: gs.Graph, add: gs.Node, other: gs.Tensor, bias: gs.Tensor) -> bool:
    """True when ONNX Runtime's MatMul+Add→Gemm fusion would take bias Add `add`.

    That fusion (a basic-level session transform, before its BiasGelu fusion) needs: `other`
    is a MatMul's output with no other use; B is 2-D; A is 2-D, or fully static with B's
    dims known (it inserts Reshapes); the bias is [N] (or [1, N] when A is 2-D); all of one
    float type. Folding such a bias into BiasGelu/FastGelu would cost the Gemm its bias
    epilogue and the GELU op a full-size scratch buffer: measured 1.5% slower on an erf
    Linear→GELU→Linear stack (benchmarks/gelu_bound.py).
    """
    matmul = G.producer(other)
    if matmul is None or matmul.op != "MatMul" or not G.is_default(matmul):
        return False
    if G.users(graph, other) != 1 or len(matmul.inputs) != 2:
        return False
    a, b, c = (G.type_of(graph, t) for t in (matmul.inputs[0], matmul.inputs[1], bias))
    out = G.type_of(graph, add.outputs[0])
    if a is None or b is None or c is None or out is None \
            or a.shape is None or b.shape is None or c.shape is None:
        return False
    if len({a.elem_type, b.elem_type, c.elem_type, out.elem_type}) != 1 \
            or a.elem_type not in _GEMM_ELEM_TYPES or len(b.shape) != 2:
        return False
    n = b.shape[1]
    if len(a.shape) == 2:
        return isinstance(n, int) and tuple(c.shape) in ((n,), (1, n))
    static = all(isinstance(d, int) for d in a.shape) and all(isinstance(d, int) for d in b.shape)
    return static and tuple(c.shape) == (n,)
