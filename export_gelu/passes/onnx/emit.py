"""Lowering emitters: the nodes each GELU form is written as, one function per form.

Every emitter takes the site's input `x` (already in the compute dtype) and writes the
site's own output tensor name, so consumers and graph outputs see no change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx
from onnx import helper, numpy_helper

from export_gelu.passes.onnx.formulas import INV_SQRT_2, QUICK_ALPHA, SQRT_2_OVER_PI, TANH_BETA
from export_gelu.passes.onnx.recognise import MS_DOMAIN, PLUGIN_OP
from export_gelu.trt_parser.plugin import PLUGIN_NAMESPACE, PLUGIN_VERSION, TYPE_IDS

#: Domain the TensorRT plugin node is written in (the parser ignores it; onnx.checker
#: accepts a node of an unknown op only outside the default domain).
PLUGIN_DOMAIN = "trt.plugins"
#: |x| bound inside the fp16-safe tanh argument: √(2/π)·(10 + 0.044715·10³) ≈ 43.6, far past
#: where tanh is ±1 in fp32, so the bound changes no fp32 result while x³ stays ≤ 1000.
FP16_SAFE_BOUND = 10.0

_NP = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
       onnx.TensorProto.DOUBLE: np.float64, onnx.TensorProto.BFLOAT16: ml_dtypes.bfloat16}


class Names:
    """Allocates node and tensor names that are unique in the graph."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name


@dataclass
class SiteBuilder:
    """Collects the nodes, initializers and value infos that replace one site."""

    prefix: str
    names: Names
    elem_type: int  # compute dtype
    shape: tuple | None  # x's shape (every elementwise intermediate has it)
    opset: int
    metadata: list[onnx.StringStringEntryProto] = field(default_factory=list)
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    value_info: list[onnx.ValueInfoProto] = field(default_factory=list)
    domains: dict[str, int] = field(default_factory=dict)

    def const(self, value: float, hint: str) -> str:
        """A scalar initializer in the compute dtype."""
        name = self.names.fresh(f"{self.prefix}/{hint}")
        self.initializers.append(numpy_helper.from_array(
            np.array(value, dtype=self._np_dtype()), name))
        return name

    def const_array(self, values: np.ndarray, hint: str) -> str:
        """A tensor initializer (a bias vector) in the compute dtype."""
        name = self.names.fresh(f"{self.prefix}/{hint}")
        self.initializers.append(numpy_helper.from_array(
            np.asarray(values).astype(self._np_dtype()), name))
        return name

    def _np_dtype(self) -> type:
        return _NP.get(self.elem_type, np.float32)

    def node(self, op: str, inputs: list[str], out: str | None = None, domain: str = "",
             elem_type: int | None = None, **attrs: object) -> str:
        """Append one node; returns its output (a fresh intermediate unless `out` is given)."""
        name = self.names.fresh(f"{self.prefix}/{op}")
        if out is None:
            out = self.names.fresh(f"{name}_output")
            self.value_info.append(helper.make_tensor_value_info(
                out, elem_type or self.elem_type, self.shape))
        node = helper.make_node(op, inputs, [out], name=name, domain=domain, **attrs)
        node.metadata_props.extend(self.metadata)
        self.nodes.append(node)
        if domain:
            self.domains[domain] = 1
        return out


# -- primitives (every runtime) -----------------------------------------------------------

def erf_primitives(b: SiteBuilder, x: str, out: str) -> None:
    """0.5·(x·(1 + erf(x/√2))): the TorchScript exporter's shape, which ORT and TensorRT fuse."""
    t = b.node("Div", [x, b.const(1.0 / INV_SQRT_2, "sqrt2")])
    t = b.node("Erf", [t])
    t = b.node("Add", [t, b.const(1.0, "one")])
    t = b.node("Mul", [x, t])
    b.node("Mul", [t, b.const(0.5, "half")], out=out)


def _clip(b: SiteBuilder, x: str, bound: float) -> str:
    if b.opset >= 11:
        return b.node("Clip", [x, b.const(-bound, "lo"), b.const(bound, "hi")])
    return b.node("Clip", [x], min=-bound, max=bound)


def tanh_primitives(b: SiteBuilder, x: str, out: str, fp16_safe: bool = False,
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


def sigmoid_primitives(b: SiteBuilder, x: str, out: str) -> None:
    """x·σ(1.702·x): QuickGELU."""
    s = b.node("Mul", [x, b.const(QUICK_ALPHA, "alpha")])
    s = b.node("Sigmoid", [s])
    b.node("Mul", [x, s], out=out)


# -- fused ops ------------------------------------------------------------------------------

def onnx_gelu(b: SiteBuilder, x: str, out: str, approximate: str) -> None:
    """ONNX `Gelu` (opset 20)."""
    b.node("Gelu", [x], out=out, approximate=approximate)


def ort_gelu(b: SiteBuilder, x: str, out: str, kind: str, bias: str | None) -> None:
    """ONNX Runtime contrib ops: Gelu / BiasGelu (exact), FastGelu (tanh), QuickGelu.

    BiasGelu(A, B) and FastGelu(X, bias) compute GELU(A + B): the bias is the Add before.
    """
    if kind == "quick":
        b.node("QuickGelu", [x], out=out, domain=MS_DOMAIN, alpha=QUICK_ALPHA)
    elif kind == "tanh":
        b.node("FastGelu", [x, bias] if bias else [x], out=out, domain=MS_DOMAIN)
    elif bias:
        b.node("BiasGelu", [x, bias], out=out, domain=MS_DOMAIN)
    else:
        b.node("Gelu", [x], out=out, domain=MS_DOMAIN)


def trt_plugin(b: SiteBuilder, x: str, out: str, bias: np.ndarray | None) -> None:
    """TensorRT's `CustomGeluPluginDynamic`: one input, one output, tanh GELU of (x + bias).

    `type_id` 0 for fp32, 1 for fp16, and the bias [1,1,E] in that same type: the plugin
    copies the attribute's raw bytes as its own type, so fp16 needs FLOAT16 data.
    `plugin_version`/`plugin_namespace` are what the creator registers ("1", empty).
    """
    type_id = 1 if b.elem_type == onnx.TensorProto.FLOAT16 else 0
    attrs: dict[str, object] = {
        "type_id": type_id,
        "plugin_version": PLUGIN_VERSION,
        "plugin_namespace": PLUGIN_NAMESPACE,
    }
    if bias is not None:
        attrs["bias"] = numpy_helper.from_array(
            np.asarray(bias).astype(TYPE_IDS[type_id]).reshape(1, 1, -1), f"{b.prefix}/bias")
    b.node(PLUGIN_OP, [x], out=out, domain=PLUGIN_DOMAIN, **attrs)
