"""The first divergence where no PyTorch module maps onto the graph (a graph without
provenance, or an ONNX MODEL): the graph node by node against the same graph in a wider
precision (float64 for a float32 graph, float32 for fp16), every float tensor an output of
both copies, one run each. The first node out of tolerance whose inputs are inside is named.

This finds what the precision does (an fp16 overflow, a cancellation), not a wrong weight or
constant: both copies carry the same ones.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.check.localize.divergence import FirstDivergence, Localization, ModuleError
from export_gelu.check.verdict.parity import errors_of, over_tolerance
from export_gelu.errors import BadInputError
from export_gelu.tolerances import Tolerances

if TYPE_CHECKING:
    import onnx

#: Above this many bytes of weights the graph is not compared node by node: both copies and
#: every intermediate would be held at once.
MAX_WEIGHT_BYTES = 1 << 30
#: The wider element type each narrow one is checked against (ONNX TensorProto codes).
_WIDER = {1: 11, 10: 1}  # FLOAT → DOUBLE, FLOAT16 → FLOAT


def _widen_tensor(tensor: onnx.TensorProto, narrow: int, wide: int) -> None:
    from onnx import helper, numpy_helper

    if tensor.data_type == narrow:
        array = numpy_helper.to_array(tensor).astype(helper.tensor_dtype_to_np_dtype(wide))
        tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))


def widened(model: onnx.ModelProto, narrow: int, wide: int) -> onnx.ModelProto:
    """A copy of `model` computing in `wide` where it computed in `narrow`: its weights,
    constants, Casts, inputs and outputs (top-level graph; value infos dropped)."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    for init in graph.initializer:
        _widen_tensor(init, narrow, wide)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                _widen_tensor(attr.t, narrow, wide)
            elif node.op_type == "Cast" and attr.name == "to" and attr.i == narrow:
                attr.i = wide
    for value in [*graph.input, *graph.output]:
        if value.type.tensor_type.elem_type == narrow:
            value.type.tensor_type.elem_type = wide
    del graph.value_info[:]
    return copy


def _run_all(model: onnx.ModelProto, feed: Mapping[str, np.ndarray], threads: int
             ) -> dict[str, np.ndarray]:
    """Every tensor of `model` (polygraphy's ModifyOutputs, mark all), one ONNX Runtime run."""
    import onnx
    from polygraphy import constants
    from polygraphy.backend.onnx import ModifyOutputs

    from export_gelu.check.runners.ort_runner import ort_runner
    from export_gelu.check.runners.quiet import quiet_polygraphy

    with quiet_polygraphy(silent=True):
        marked = ModifyOutputs(model, outputs=constants.MARK_ALL, copy=True)()
    with tempfile.TemporaryDirectory(prefix="export-gelu-nodes-") as tmp:
        path = Path(tmp) / "marked.onnx"
        onnx.save(marked, str(path), save_as_external_data=marked.ByteSize() > (1 << 30))
        del marked
        runner = ort_runner(path, threads=threads, name="onnxruntime-nodes")
        with quiet_polygraphy(silent=True), runner:
            return dict(runner.infer(dict(feed)))


def localize_nodes(graph_path: Path, feed: Mapping[str, np.ndarray], tol: Tolerances,
                   threads: int = 1) -> Localization:
    """The graph at `graph_path` against itself in the wider precision, node by node."""
    import onnx

    from export_gelu.graph.provenance import module_of, source_of

    head = onnx.load(str(graph_path), load_external_data=False)
    if _weight_bytes(head) > MAX_WEIGHT_BYTES:
        return Localization(method="none", reason=f"the graph's weights are over "
                                                  f"{MAX_WEIGHT_BYTES >> 30} GiB: not compared "
                                                  "node by node")
    del head
    model = onnx.load(str(graph_path))
    narrow = _narrow_type(model)
    if narrow is None:
        return Localization(method="none", reason="the graph computes in no float type that a "
                                                  "wider one can check")
    wide = _WIDER[narrow]
    wide_np = onnx.helper.tensor_dtype_to_np_dtype(wide)
    narrow_np = onnx.helper.tensor_dtype_to_np_dtype(narrow)
    wide_feed = {k: v.astype(wide_np) if v.dtype == narrow_np else v for k, v in feed.items()}
    try:
        got = _run_all(model, feed, threads)
        ref = _run_all(widened(model, narrow, wide), wide_feed, threads)
    except BadInputError as exc:
        first = str(exc).split("cannot load it: ")[-1][:200]
        return Localization(method="none", reason=f"the graph cannot run in "
                                                  f"{np.dtype(wide_np).name} here: {first}")
    loc = Localization(method="nodes")
    bad: set[str] = set()
    for node in model.graph.node:
        outs = [o for o in node.output if o in got and o in ref
                and np.issubdtype(np.asarray(got[o]).dtype, np.floating)]
        if not outs or node.op_type == "Constant":
            continue
        with np.errstate(all="ignore"):  # an inf or nan in the graph is a finding, not noise
            stats, _ = errors_of([ref[outs[0]]], [got[outs[0]]], tol.atol, tol.rtol)
        inside = not over_tolerance(stats, tol.atol)  # a zero matched is no divergence
        loc.modules.append(ModuleError(node.name, outs[0], len(loc.modules), stats.max_abs,
                                       stats.ref_scale, inside))
        if inside:
            continue
        bad.update(outs)
        if loc.first is None and not bad.intersection(node.input):
            loc.first = FirstDivergence(node.name, node.op_type, outs[0], module_of(node) or "",
                                        source_of(node) or "", stats.max_abs, tol.atol)
    return loc


def _weight_bytes(model: onnx.ModelProto) -> int:
    """The bytes of a graph's initializers, those in external-data files included."""
    total = 0
    for tensor in model.graph.initializer:
        entries = {e.key: e.value for e in tensor.external_data}
        total += int(entries.get("length", 0) or 0) if entries else len(tensor.raw_data)
    return total


def _narrow_type(model: onnx.ModelProto) -> int | None:
    """FLOAT16 when the graph holds fp16 tensors, else FLOAT when it holds fp32, else None."""
    types = {i.data_type for i in model.graph.initializer}
    types |= {v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]}
    for narrow in (10, 1):
        if narrow in types:
            return narrow
    return None
