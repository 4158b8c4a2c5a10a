"""fp32 islands in an fp16 graph: where a tensor's values overflow fp16 (|x| > 65504: x³ in
a tanh GELU for |x| > 40, a LayerNorm variance), compute just the nodes that make and read it
in fp32, with Casts at the island's edges, so ONNX Runtime runs the rest in fp16.

The overflow is observed, not guessed: the fp16 graph is widened to fp32 (`widened`), every
float tensor marked as an output (polygraphy's `ModifyOutputs`), run once in ONNX Runtime on
the feed, and each tensor whose largest finite |value| exceeds fp16's range is a site.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from export_gelu.json_value import JsonObject

FP16_MAX = float(np.finfo(np.float16).max)
_F16, _F32 = TensorProto.FLOAT16, TensorProto.FLOAT


@dataclass
class Island:
    """One overflow site and the nodes kept in fp32 around it."""

    tensor: str  # the tensor whose values overflow fp16
    node: str  # the node that makes it
    op_type: str
    max_abs: float  # its largest |value| in the fp32 graph on the feed
    nodes: list[str] = field(default_factory=list)  # every node computed in fp32 for it

    def to_json(self) -> JsonObject:
        return asdict(self)


def _widen_tensor(t: TensorProto) -> None:
    if t.data_type == _F16:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))


def _widen_graph(graph: onnx.GraphProto) -> None:
    for t in graph.initializer:
        _widen_tensor(t)
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        if vi.type.tensor_type.elem_type == _F16:
            vi.type.tensor_type.elem_type = _F32
    for node in graph.node:
        for attr in node.attribute:
            if attr.name == "to" and attr.i == _F16:
                attr.i = _F32
            if attr.type == onnx.AttributeProto.TENSOR:
                _widen_tensor(attr.t)
            if attr.type == onnx.AttributeProto.GRAPH:
                _widen_graph(attr.g)


def widened(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the fp16 graph `model` computing in fp32 (weights, Casts, inputs, outputs)."""
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    _widen_graph(wide.graph)
    return wide


def overflow_sites(model: onnx.ModelProto, feed: Mapping[str, np.ndarray]
                   ) -> list[tuple[str, float]]:
    """(tensor, max |value|) of every float tensor of the fp16 graph `model` whose values, in
    the same graph run in fp32 on `feed`, exceed fp16's range; graph order."""
    import onnxruntime as ort
    from polygraphy import constants
    from polygraphy.backend.onnx import ModifyOutputs

    wide = ModifyOutputs(widened(model), outputs=constants.MARK_ALL)()
    session = ort.InferenceSession(wide.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    inputs = {i.name: np.asarray(feed[i.name]).astype(np.float32)
              if np.asarray(feed[i.name]).dtype == np.float16 else np.asarray(feed[i.name])
              for i in session.get_inputs()}
    found = []
    to_softmax = _reaching_softmax(model)
    for name, value in zip(names, session.run(names, inputs)):
        arr = np.asarray(value)
        if arr.dtype.kind != "f" or arr.size == 0:
            continue
        beyond = arr[np.isfinite(arr) & (np.abs(arr) > FP16_MAX)]
        if beyond.size == 0:
            continue
        if name in to_softmax and bool((beyond < 0).all()):
            continue  # a mask bias on its way to Softmax: −inf there gives the same 0
        found.append((name, float(np.abs(arr[np.isfinite(arr)]).max())))
    return found


#: Ops a mask bias passes through unchanged in meaning on its way to a Softmax.
_MASK_PATH = {"Add", "Sub", "Where", "Reshape", "Transpose", "Cast", "Expand", "Squeeze",
              "Unsqueeze", "Mul", "Div", "Min", "Max"}


def _reaching_softmax(model: onnx.ModelProto) -> set[str]:
    """Tensors that reach a Softmax through mask-preserving ops only."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    memo: dict[str, bool] = {}

    def reaches(name: str, depth: int) -> bool:
        if name in memo:
            return memo[name]
        ok = depth < 8 and any(
            n.op_type == "Softmax" or (n.op_type in _MASK_PATH
                                       and any(reaches(o, depth + 1) for o in n.output))
            for n in readers.get(name, []))
        memo[name] = ok
        return ok

    return {name for name in readers if reaches(name, 0)}


def _is_fp16(tensor: object) -> bool:
    dtype = getattr(tensor, "dtype", None)
    try:
        return dtype is not None and np.dtype(dtype) == np.float16
    except TypeError:
        return dtype == _F16


def with_islands(model: onnx.ModelProto, sites: list[tuple[str, float]]
                 ) -> tuple[onnx.ModelProto, list[Island]]:
    """`model` (fp16) with each site's maker and readers computed in fp32: their fp16 inputs
    cast up (fp16 constants widened in place when only the island reads them), their outputs
    cast back down where a node outside the island (or the graph's output) reads them."""
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(model))  # every tensor's type
    tensors = graph.tensors()
    island_nodes: dict[str, gs.Node] = {}
    islands = []
    for name, top in sites:
        t = tensors.get(name)
        if t is None or not t.inputs:
            continue
        maker = t.inputs[0]
        members = [maker, *t.outputs]
        for n in members:
            island_nodes.setdefault(n.name, n)
        islands.append(Island(name, maker.name, maker.op, top, [n.name for n in members]))
    inside = set(island_nodes)
    up_cache: dict[str, gs.Variable] = {}
    for node in island_nodes.values():
        for i, inp in enumerate(list(node.inputs)):
            if not _is_fp16(inp):
                continue
            if isinstance(inp, gs.Constant):
                if all(c.name in inside for c in inp.outputs):
                    inp.values = inp.values.astype(np.float32)
                    continue
                wide = gs.Constant(f"{inp.name}_fp32", inp.values.astype(np.float32))
                node.inputs[i] = wide
                continue
            maker = inp.inputs[0] if inp.inputs else None
            if maker is not None and maker.name in inside:
                continue  # already fp32: made inside the island
            if inp.name not in up_cache:
                up = gs.Variable(f"{inp.name}_to_fp32", dtype=np.float32, shape=inp.shape)
                graph.nodes.append(gs.Node("Cast", f"{inp.name}_cast_up", attrs={"to": _F32},
                                           inputs=[inp], outputs=[up]))
                up_cache[inp.name] = up
            node.inputs[i] = up_cache[inp.name]
        if node.op == "Cast" and node.attrs.get("to") == _F16:
            node.attrs["to"] = _F32
        for j, out in enumerate(list(node.outputs)):
            if not _is_fp16(out):
                continue
            readers_outside = [r for r in out.outputs if r.name not in inside]
            is_output = out in graph.outputs
            wide = gs.Variable(f"{out.name}_fp32", dtype=np.float32, shape=out.shape)
            node.outputs[j] = wide
            for r in list(out.outputs):
                if r.name in inside:
                    r.inputs[r.inputs.index(out)] = wide
            if readers_outside or is_output:
                graph.nodes.append(gs.Node("Cast", f"{out.name}_cast_down",
                                           attrs={"to": _F16}, inputs=[wide], outputs=[out]))
    graph.cleanup().toposort()
    fixed = gs.export_onnx(graph)
    del fixed.opset_import[:]
    fixed.opset_import.extend(model.opset_import)
    fixed.ir_version = model.ir_version
    fixed.producer_name, fixed.producer_version = model.producer_name, model.producer_version
    fixed.metadata_props.extend(model.metadata_props)
    return fixed, islands
