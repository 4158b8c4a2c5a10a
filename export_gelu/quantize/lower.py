"""LOWER a plan for one route: Q/DQ pairs written with onnx-graphsurgeon, or the fp32 graph
and a TensorRT calibration cache.

Explicit Q/DQ (`route.kind == QDQ`), per quantized product:

    activation ─ QuantizeLinear(s_a, 0) ─ DequantizeLinear(s_a, 0) ─┐
    weight ─ QuantizeLinear(s_w, 0, axis) ─ DequantizeLinear(s_w, 0, axis) ─ product
             (`float_q_dq`; `quantized_dq`: an INT8 initializer ─ DequantizeLinear)

- one pair per product input (a tensor read by three products gets three pairs: each
  product sees its own DequantizeLinear, the pattern TensorRT fuses into the product);
- the zero point is always written (0, of the format's type: INT8 or FLOAT8E4M3FN), the
  scale is a float32 initializer, per tensor without an `axis` attribute (TensorRT 8.0
  refuses one there), per output channel with the channel's axis;
- s_a = amax / qmax from the calibrated range, s_w = max|W| / qmax per channel (a channel
  of zeros gets scale 1);
- the new nodes carry the product's module (node metadata), so a module's error stays
  attributable.

Calibration cache (`CALIBRATION_CACHE`, TensorRT 7.x): the graph is not changed; the cache
holds the scale of each planned activation under the graph's tensor name (`cache.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto
from onnx_graphsurgeon.logger import G_LOGGER

from export_gelu import graph as G
from export_gelu.errors import TargetUnmetError
from export_gelu.quantize.cache import calibration_cache_text
from export_gelu.quantize.calibrate import TensorRange
from export_gelu.quantize.formats import INT8, QuantFormat
from export_gelu.quantize.placement import QuantPlan, QuantPoint
from export_gelu.quantize.routes import CALIBRATION_CACHE, QuantRoute


@dataclass(frozen=True)
class Quantized:
    """A lowered plan: the graph to write, the scales it holds, the cache where one is due."""

    model: onnx.ModelProto
    route: QuantRoute
    plan: QuantPlan
    activation_scales: dict[str, float]  # activation tensor → its scale
    weight_scales: dict[str, np.ndarray] = field(default_factory=dict)  # weight → scales
    calibration_cache: str | None = None  # TensorRT's cache text (CALIBRATION_CACHE route)
    skipped: tuple[str, ...] = ()  # planned products not quantized, with why

    @property
    def quantized_products(self) -> int:
        return len(self.plan.points) - len(self.skipped)


def weight_scales(weight: np.ndarray, axis: int | None, fmt: QuantFormat) -> np.ndarray:
    """Symmetric scales of `weight`: one per index of `axis`, or one (shape ()) for None; a
    channel of zeros gets scale 1 (any positive scale stores it exactly)."""
    w = np.abs(weight.astype(np.float64))
    amax = w.max() if axis is None else w.max(axis=tuple(i for i in range(w.ndim) if i != axis))
    return np.where(amax > 0, fmt.scale(amax), np.float32(1.0)).astype(np.float32)


def _quantized_values(weight: np.ndarray, scale: np.ndarray, axis: int | None,
                      fmt: QuantFormat) -> onnx.TensorProto:
    """The weight stored quantized (the integers or FP8 values QuantizeLinear would make)."""
    s = scale if axis is None else scale.reshape([-1 if i == axis else 1
                                                  for i in range(weight.ndim)])
    q = weight.astype(np.float32) / s
    if fmt is INT8:
        ints = np.clip(np.round(q), -128, 127).astype(np.int8)
        return onnx.numpy_helper.from_array(ints)
    return onnx.helper.make_tensor("", fmt.elem_type, list(weight.shape),
                                   np.clip(q, -fmt.qmax, fmt.qmax).ravel().tolist())


class _Writer:
    """Makes the Q/DQ nodes of one graph (new nodes are placed by the caller)."""

    def __init__(self, graph: gs.Graph, route: QuantRoute) -> None:
        self.graph, self.route, self.fmt = graph, route, route.fmt

    def _zero_point(self, base: str, count: int | None) -> gs.Constant:
        if count is None:
            return G.scalar(self.graph, 0.0, self.fmt.elem_type, f"{base}_zero_point")
        if self.fmt is INT8:
            return G.constant(self.graph, np.zeros(count, np.int8), f"{base}_zero_point")
        return self._proto_constant(
            onnx.helper.make_tensor("", self.fmt.elem_type, [count], [0.0] * count),
            f"{base}_zero_point")

    def _proto_constant(self, proto: onnx.TensorProto, base: str) -> gs.Constant:
        """A new initializer holding `proto` (a FLOAT8 tensor numpy cannot hold)."""
        from onnx_graphsurgeon.ir.tensor import LazyValues

        const = G.constant(self.graph, np.zeros(0, np.float32), base)  # made and tracked here
        proto.name = const.name
        const._values = LazyValues(proto)
        return const

    def pair(self, tensor: gs.Tensor, scale: np.ndarray, axis: int | None, base: str,
             like: gs.Node, quantize: bool = True) -> tuple[list[gs.Node], gs.Tensor]:
        """(the nodes, the dequantized tensor) for `tensor` at `scale`: Q then DQ, or DQ only
        (`quantize=False`: `tensor` already holds the quantized values)."""
        count = None if axis is None else int(scale.size)
        s = G.constant(self.graph, scale.astype(np.float32), f"{base}_scale")
        zp = self._zero_point(base, count)
        nodes: list[gs.Node] = []
        q = tensor
        if quantize:
            qn = G.node(self.graph, "QuantizeLinear", [tensor, s, zp], base=base, like=like)
            if axis is not None:
                qn.attrs["axis"] = axis
            qn.outputs[0].dtype = self.fmt.elem_type
            nodes.append(qn)
            q = qn.outputs[0]
        dq = G.node(self.graph, "DequantizeLinear", [q, s, zp], base=base, like=like)
        if axis is not None:
            dq.attrs["axis"] = axis
        dq.outputs[0].dtype = TensorProto.FLOAT
        nodes.append(dq)
        return nodes, dq.outputs[0]

    def quantized_weight(self, weight: np.ndarray, scale: np.ndarray, axis: int | None,
                         base: str) -> gs.Constant:
        proto = _quantized_values(weight, scale, axis, self.fmt)
        if self.fmt is INT8:
            return G.constant(self.graph, onnx.numpy_helper.to_array(proto), f"{base}_quantized")
        return self._proto_constant(proto, f"{base}_quantized")


def _point_nodes(writer: _Writer, node: gs.Node, point: QuantPoint, act_scale: float,
                 graph: gs.Graph) -> tuple[list[gs.Node], np.ndarray]:
    route = writer.route
    base = node.name or point.output
    nodes, act = writer.pair(node.inputs[0], np.asarray(act_scale, np.float32), None,
                             f"{base}/input", node)
    weight_t = node.inputs[point.weight_index]
    weight = G.value(weight_t, external=True)
    if weight is None:
        raise TargetUnmetError(f"cannot read the weight {weight_t.name!r} of {base}")
    axis = point.weight_axis if route.weight_per_channel else None
    scales = weight_scales(weight, axis, route.weight_fmt)
    if route.weights == "quantized_dq":
        stored = writer.quantized_weight(weight, scales, axis, f"{base}/weight")
        w_nodes, w = writer.pair(stored, scales, axis, f"{base}/weight", node, quantize=False)
    else:
        w_nodes, w = writer.pair(weight_t, scales, axis, f"{base}/weight", node)
    G.set_input(node, 0, act)
    G.set_input(node, point.weight_index, w)
    return nodes + w_nodes, scales


def _lower_qdq(model: onnx.ModelProto, plan: QuantPlan, scales: Mapping[str, float],
               route: QuantRoute) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    weight_scale: dict[str, np.ndarray] = {}
    # graphsurgeon warns that numpy has no FLOAT8 type each time it meets one: it keeps the
    # ONNX type, which is what is wanted here.
    with G_LOGGER.suppress(G_LOGGER.ERROR), G.opened(out, write=True) as graph:
        G.unique_node_names(graph)
        if G.opset(graph) < route.min_opset:
            why = "FLOAT8E4M3FN" if route.precision == "fp8" else "the per-channel axis"
            raise TargetUnmetError(
                f"--precision {route.precision}: Q/DQ for {route.target} need opset "
                f"{route.min_opset} or newer ({why}); the graph is at opset {G.opset(graph)}")
        by_output = {n.outputs[0].name: n for n in graph.nodes if n.outputs}
        placed: dict[int, list[gs.Node]] = {}
        for point in plan.points:
            if point.activation not in scales:
                continue
            node = by_output.get(point.output)
            if node is None or node.inputs[0].name != point.activation:
                raise ValueError(f"the plan does not match the graph at {point.node!r}")
            nodes, ws = _point_nodes(_Writer(graph, route), node, point,
                                     scales[point.activation], graph)
            placed[id(node)] = nodes
            weight_scale[point.weight] = ws
        ordered: list[gs.Node] = []
        for node in graph.nodes:
            ordered.extend(placed.get(id(node), ()))
            ordered.append(node)
        G.set_nodes(graph, ordered)
    return out, weight_scale


def activation_scales(plan: QuantPlan, ranges: Mapping[str, TensorRange],
                      fmt: QuantFormat) -> tuple[dict[str, float], list[str]]:
    """(tensor → scale, why some planned activations get none): a range of zero or not
    finite (a tensor constant at 0 on the calibration data) leaves its products in float."""
    scales: dict[str, float] = {}
    missing: list[str] = []
    for name in plan.activations:
        r = ranges.get(name)
        if r is None:
            missing.append(f"{name}: not calibrated")
        elif not np.isfinite(r.amax) or r.amax <= 0:
            missing.append(f"{name}: its calibrated range is {r.lowest}..{r.highest}")
        else:
            scales[name] = float(fmt.scale(r.amax))
    return scales, missing


def lower(model: onnx.ModelProto, plan: QuantPlan, ranges: Mapping[str, TensorRange],
          route: QuantRoute) -> Quantized:
    """`plan` written for `route` into a copy of `model` (which is not changed)."""
    if plan.precision != route.precision:
        raise ValueError(f"a {plan.precision} plan on a {route.precision} route")
    scales, missing = activation_scales(plan, ranges, route.fmt)
    skipped = tuple(f"{p.node}: {why}" for p in plan.points for why in missing
                    if why.startswith(p.activation + ":"))
    if route.kind == CALIBRATION_CACHE:
        text = calibration_cache_text(scales, route.trt_version)
        return Quantized(model, route, plan, scales, calibration_cache=text, skipped=skipped)
    written, weight_scale = _lower_qdq(model, plan, scales, route)
    return Quantized(written, route, plan, scales, weight_scale, skipped=skipped)
