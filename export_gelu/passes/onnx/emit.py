"""Lowering emitters: the nodes each GELU form is written as, one function per form.

Every emitter takes the site's input `x` (already in the compute dtype) and writes the
site's own output tensor name, so consumers and graph outputs see no change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.passes.onnx.formulas import INV_SQRT_2, QUICK_ALPHA, SQRT_2_OVER_PI, TANH_BETA
from export_gelu.passes.onnx.recognise import MS_DOMAIN, PLUGIN_OP
from export_gelu.trt_parser.plugin import PLUGIN_NAMESPACE, PLUGIN_VERSION, TYPE_IDS

#: Domain the TensorRT plugin node is written in (the parser ignores it; onnx.checker
#: accepts a node of an unknown op only outside the default domain).
PLUGIN_DOMAIN = "trt.plugins"
#: |x| bound inside the fp16-safe tanh argument: √(2/π)·(10 + 0.044715·10³) ≈ 43.6, far past
#: where tanh is ±1 in fp32, so the bound changes no fp32 result while x³ stays ≤ 1000.
FP16_SAFE_BOUND = 10.0

_NP: dict[int, type] = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
       onnx.TensorProto.DOUBLE: np.float64, onnx.TensorProto.BFLOAT16: ml_dtypes.bfloat16}


@dataclass
class SiteBuilder:
    """Makes the nodes that replace one site (placed in the graph by the caller)."""

    graph: gs.Graph
    prefix: str
    elem_type: int  # compute dtype
    shape: tuple | None  # x's shape (every elementwise intermediate has it)
    opset: int
    like: gs.Node | None = None  # the node whose module scopes the new nodes carry
    nodes: list[gs.Node] = field(default_factory=list)

    def const(self, value: float, hint: str) -> gs.Constant:
        """A scalar initializer in the compute dtype."""
        return G.constant(self.graph, np.array(value, dtype=self._np_dtype()),
                          f"{self.prefix}/{hint}")

    def const_array(self, values: np.ndarray, hint: str) -> gs.Constant:
        """A tensor initializer (a bias vector) in the compute dtype."""
        return G.constant(self.graph, np.asarray(values).astype(self._np_dtype()),
                          f"{self.prefix}/{hint}")

    def _np_dtype(self) -> type:
        return _NP.get(self.elem_type, np.float32)

    def node(self, op: str, inputs: list[gs.Tensor], out: gs.Tensor | None = None,
             domain: str = "", elem_type: int | None = None, **attrs: Any) -> gs.Tensor:
        """Append one node; returns its output (a fresh intermediate unless `out` is given)."""
        name = G.fresh_name(self.graph, f"{self.prefix}/{op}")
        if out is None:
            out = G.variable(self.graph, f"{name}_output", elem_type or self.elem_type,
                             self.shape)
        self.nodes.append(G.node(self.graph, op, inputs, outputs=[out], name=name,
                                 domain=domain, like=self.like, **attrs))
        return out


# -- primitives (every runtime) -----------------------------------------------------------

def erf_primitives(b: SiteBuilder, x: gs.Tensor, out: gs.Tensor) -> None:
    """0.5·(x·(1 + erf(x/√2))): the TorchScript exporter's shape, which ORT and TensorRT fuse."""
    t = b.node("Div", [x, b.const(1.0 / INV_SQRT_2, "sqrt2")])
    t = b.node("Erf", [t])
    t = b.node("Add", [t, b.const(1.0, "one")])
    t = b.node("Mul", [x, t])
    b.node("Mul", [t, b.const(0.5, "half")], out=out)


def _clip(b: SiteBuilder, x: gs.Tensor, bound: float) -> gs.Tensor:
    if b.opset >= 11:
        return b.node("Clip", [x, b.const(-bound, "lo"), b.const(bound, "hi")])
    return b.node("Clip", [x], min=-bound, max=bound)


def tanh_primitives(b: SiteBuilder, x: gs.Tensor, out: gs.Tensor, fp16_safe: bool = False,
                    ort_fusable: bool = True) -> None:
    """(1 + tanh((1 + 0.044715·u·u)·(√(2/π)·u)))·(0.5·x), u = x (or x bounded to ±10 for fp16).

    No `Pow`: the factored form (HF's `gelu_fast`, Megatron's), whose largest intermediate,
    0.044715·u·u, fp16 holds up to |u| ≈ 1210 (`Pow(x, 3)` overflows past 40.3). Written in
    the node order ONNX Runtime's online FastGelu fusion matches, so an fp32 graph below
    opset 20 still runs one fused op in ORT. The fp16-safe form bounds x only inside the tanh
    argument, where tanh is already ±1 in fp32 beyond the bound: GELU(x) itself is unchanged.

    `ort_fusable=False` writes the last product as ((1 + tanh)·x)·0.5 instead, with no x·0.5
    node: ORT (1.32) merges equal x·0.5 nodes, then its FastGelu fusion deletes the merged
    node that another consumer still reads and the session refuses the graph.
    """
    u = _clip(b, x, FP16_SAFE_BOUND) if fp16_safe else x
    t = b.node("Mul", [u, b.const(TANH_BETA, "beta")])
    t = b.node("Mul", [t, u])
    t = b.node("Add", [t, b.const(1.0, "one")])
    scaled = b.node("Mul", [u, b.const(SQRT_2_OVER_PI, "sqrt_2_over_pi")])
    t = b.node("Mul", [t, scaled])
    t = b.node("Tanh", [t])
    t = b.node("Add", [t, b.const(1.0, "one")])
    if ort_fusable:
        half_x = b.node("Mul", [x, b.const(0.5, "half")])
        b.node("Mul", [t, half_x], out=out)
    else:
        b.node("Mul", [b.node("Mul", [t, x]), b.const(0.5, "half")], out=out)


def sigmoid_primitives(b: SiteBuilder, x: gs.Tensor, out: gs.Tensor) -> None:
    """x·σ(1.702·x): QuickGELU."""
    s = b.node("Mul", [x, b.const(QUICK_ALPHA, "alpha")])
    s = b.node("Sigmoid", [s])
    b.node("Mul", [x, s], out=out)


# -- fused ops ------------------------------------------------------------------------------

def onnx_gelu(b: SiteBuilder, x: gs.Tensor, out: gs.Tensor, approximate: str) -> None:
    """ONNX `Gelu` (opset 20)."""
    b.node("Gelu", [x], out=out, approximate=approximate)


def ort_gelu(b: SiteBuilder, x: gs.Tensor, out: gs.Tensor, kind: str,
             bias: gs.Tensor | None) -> None:
    """ONNX Runtime contrib ops: Gelu / BiasGelu (exact), FastGelu (tanh), QuickGelu.

    BiasGelu(A, B) and FastGelu(X, bias) compute GELU(A + B): the bias is the Add before.
    """
    if kind == "quick":
        b.node("QuickGelu", [x], out=out, domain=MS_DOMAIN, alpha=QUICK_ALPHA)
    elif kind == "tanh":
        b.node("FastGelu", [x, bias] if bias is not None else [x], out=out, domain=MS_DOMAIN)
    elif bias is not None:
        b.node("BiasGelu", [x, bias], out=out, domain=MS_DOMAIN)
    else:
        b.node("Gelu", [x], out=out, domain=MS_DOMAIN)


def trt_plugin(b: SiteBuilder, x: gs.Tensor, out: gs.Tensor, bias: np.ndarray | None) -> None:
    """TensorRT's `CustomGeluPluginDynamic`: one input, one output, tanh GELU of (x + bias).

    `type_id` 0 for fp32, 1 for fp16, and the bias [1,1,E] in that same type: the plugin
    copies the attribute's raw bytes as its own type, so fp16 needs FLOAT16 data.
    `plugin_version`/`plugin_namespace` are what the creator registers ("1", empty).
    """
    type_id = 1 if b.elem_type == onnx.TensorProto.FLOAT16 else 0
    attrs: dict[str, Any] = {
        "type_id": type_id,
        "plugin_version": PLUGIN_VERSION,
        "plugin_namespace": PLUGIN_NAMESPACE,
    }
    if bias is not None:
        attrs["bias"] = gs.Constant(f"{b.prefix}/bias",
                                    np.asarray(bias).astype(TYPE_IDS[type_id]).reshape(1, 1, -1))
    b.node(PLUGIN_OP, [x], out=out, domain=PLUGIN_DOMAIN, **attrs)
