"""WHAT is quantized, decided once for every target (canonicalize; `lower.py` writes it).

The rule set (docs/quantization.md, "Placement"):

1. A *weight product* is a MatMul, Gemm or Conv whose weight is a constant of the graph
   (an initializer or a Constant node): MatMul's second input (2-D, [K, N]), Gemm's B
   (transB = 1: [N, K]), Conv's W ([K, C/g, …]). Its two inputs are quantized: the
   activation per tensor, the weight per output channel (the axis of N, or of K for Conv).
   Products of two activations (attention's Q·Kᵀ and P·V) stay in float: no module owns
   their operands, so no PyTorch reference can quantize them the same way.
2. No tensor of a GELU site is quantized, in any form the passes recognise (erf, tanh and
   sigmoid formulas, ONNX/com.microsoft Gelu ops, the TensorRT plugin): a product whose
   activation input is the site's input or one of its inner values keeps that input in
   float. A GELU's *output* is quantized only where it is a product's input, on that edge.
3. Nothing else is quantized: residual Adds, LayerNormalization, Softmax and the products'
   outputs stay in float, for TensorRT to fuse bias, activation and residual into the
   product's epilogue.
4. Products of a module kept in higher precision (`keep`, a module path or a prefix of
   one) stay in float.

The plan names tensors and nodes, so it holds for the graph it was made from and any copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto

from export_gelu import graph as G
from export_gelu.graph.provenance import module_of
from export_gelu.passes.onnx.recognise import find_matches
from export_gelu.quantize.formats import PRECISIONS

PRODUCT_OPS = ("MatMul", "Gemm", "Conv")


@dataclass(frozen=True)
class QuantPoint:
    """One weight product whose two inputs are quantized."""

    node: str  # the product node's name
    output: str  # its first output tensor (unique in the graph: how lowering finds it)
    op: str  # MatMul | Gemm | Conv
    activation: str  # the activation input tensor (per-tensor scale)
    weight: str  # the weight tensor (per-channel scale)
    weight_index: int  # which input of the node the weight is
    weight_axis: int  # the weight's output-channel axis
    module: str | None  # the PyTorch module the node came from (None: not recorded)


@dataclass(frozen=True)
class Skipped:
    """A product left in float, and why."""

    node: str
    op: str
    reason: str
    module: str | None = None


@dataclass(frozen=True)
class QuantPlan:
    """Every weight product to quantize, every product left in float, the GELU tensors."""

    precision: str  # int8 | fp8
    points: tuple[QuantPoint, ...]
    skipped: tuple[Skipped, ...]
    gelu_tensors: frozenset[str]  # inputs and inner values of every GELU site
    gelu_nodes: frozenset[str]  # the nodes of every GELU site
    keep: tuple[str, ...] = ()
    weight_products: int = 0  # products with a constant weight, quantized or not
    notes: tuple[str, ...] = field(default=())

    @property
    def activations(self) -> tuple[str, ...]:
        """The activation tensors to calibrate, each once, in graph order."""
        return tuple(dict.fromkeys(p.activation for p in self.points))

    @property
    def modules(self) -> tuple[str, ...]:
        """The modules whose products are quantized, in graph order."""
        return tuple(dict.fromkeys(p.module for p in self.points if p.module))

    @property
    def coverage(self) -> float:
        """The share of weight products quantized (1.0 for a graph without any)."""
        return len(self.points) / self.weight_products if self.weight_products else 1.0

    def without(self, modules: Iterable[str]) -> QuantPlan:
        """This plan with the products of `modules` (or modules under them; a product's node
        name for one without a module) kept in float."""
        keep = tuple(dict.fromkeys([*self.keep, *modules]))
        kept = [p for p in self.points if kept_by(p.module, keep) or p.node in keep]
        return QuantPlan(self.precision, tuple(p for p in self.points if p not in kept),
                         self.skipped + tuple(Skipped(p.node, p.op, _kept_reason(p.module),
                                                      p.module) for p in kept),
                         self.gelu_tensors, self.gelu_nodes, keep, self.weight_products,
                         self.notes)


def kept_by(module: str | None, keep: Sequence[str]) -> bool:
    """Whether `module` is one of `keep` or inside one of them."""
    return module is not None and any(module == k or module.startswith(k + ".") for k in keep)


def _kept_reason(module: str | None) -> str:
    return f"module {module} kept in higher precision"


def _weight_of(graph: gs.Graph, node: gs.Node) -> tuple[int, int] | str:
    """(weight input index, output-channel axis) of a product, or why it has none."""
    ins = node.inputs
    if len(ins) < 2 or ins[0].is_empty() or ins[1].is_empty():
        return "fewer than two inputs"
    a_const, b_const = G.is_constant(graph, ins[0]), G.is_constant(graph, ins[1])
    if node.op == "MatMul":
        if a_const and not b_const:
            return "its constant operand is on the left"
        if not b_const:
            return "a product of two activations"
        w = G.type_of(graph, ins[1])
        if w is None or w.shape is None or len(w.shape) != 2:
            return "its weight is not 2-D"
        return 1, 1
    if node.op == "Gemm":
        if int(node.attrs.get("transA", 0)):
            return "Gemm with transA"
        if not b_const:
            return "a product of two activations"
        return 1, 0 if int(node.attrs.get("transB", 0)) else 1
    if not b_const:  # Conv
        return "its weight is computed"
    return 1, 0


def _gelu_sets(graph: gs.Graph) -> tuple[set[str], set[str]]:
    """(tensor names, node names) of every GELU site: each site's input and inner values
    (its output is the site's result, free to be quantized where a product reads it)."""
    tensors: set[str] = set()
    nodes: set[str] = set()
    for m in find_matches(graph):
        nodes.update(n.name for n in m.nodes)
        tensors.add(m.x.name)
        if m.bias is not None:
            tensors.add(m.bias.name)
        for n in m.nodes:
            tensors.update(t.name for t in n.outputs if t is not m.output)
    return tensors, nodes


def _float32(graph: gs.Graph, tensor: gs.Tensor) -> bool:
    typed = G.type_of(graph, tensor)
    return typed is not None and typed.elem_type == TensorProto.FLOAT


def _plan_graph(graph: gs.Graph, precision: str, keep: Sequence[str]) -> QuantPlan:
    G.unique_node_names(graph)
    gelu_tensors, gelu_nodes = _gelu_sets(graph)
    points: list[QuantPoint] = []
    skipped: list[Skipped] = []
    weight_products = 0
    for node in graph.nodes:
        if node.op not in PRODUCT_OPS or not G.is_default(node):
            continue
        module = module_of(node)
        found = _weight_of(graph, node)
        if isinstance(found, str):
            skipped.append(Skipped(node.name, node.op, found, module))
            continue
        weight_products += 1
        index, axis = found
        act, weight = node.inputs[0], node.inputs[index]
        reason = None
        if node.name in gelu_nodes:
            reason = "it is part of a GELU site"
        elif act.name in gelu_tensors:
            reason = f"its input {act.name!r} is inside a GELU site"
        elif not (_float32(graph, act) and _float32(graph, weight)):
            reason = "its inputs are not float32"
        elif kept_by(module, keep):
            reason = _kept_reason(module)
        if reason:
            skipped.append(Skipped(node.name, node.op, reason, module))
            continue
        points.append(QuantPoint(node.name, node.outputs[0].name, node.op, act.name,
                                 weight.name, index, axis, module))
    return QuantPlan(precision, tuple(points), tuple(skipped), frozenset(gelu_tensors),
                     frozenset(gelu_nodes), tuple(keep), weight_products)


def plan_quantization(model: onnx.ModelProto, precision: str,
                      keep: Sequence[str] = ()) -> QuantPlan:
    """What to quantize in `model` at `precision` (int8 | fp8), keeping the products of the
    modules in `keep` in float. The model is not changed."""
    if precision not in PRECISIONS:
        raise ValueError(f"not a quantized precision: {precision!r}")
    with G.opened(model) as graph:
        return _plan_graph(graph, precision, keep)
