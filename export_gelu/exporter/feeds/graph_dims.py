"""The `--dynamic` dims in the written graph: the TorchScript exporter's `dynamic_axes`, the
inputs' and outputs' dims named as the flags name them, and axes an exporter left static."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import onnx

from export_gelu.exporter.feeds.dynamic_dims import onnx_named_axes
from export_gelu.exporter.feeds.dynamic_plan import DynamicPlan
from export_gelu.flags.dynamic import DimRange

#: Why a dynamic export below opset 18 goes through the dynamo exporter and the down-converter.
DOWNCONVERT_NOTE = ("dynamic dims: exported with the dynamo exporter at opset {opset}, then "
                    "converted down to opset {target} (the TorchScript exporter traces an "
                    "ExportedProgram's sizes as constants: torch.jit.trace does not record "
                    "aten.sym_size)")


def torchscript_dynamic_axes(plan: DynamicPlan) -> dict[str, dict[int, str]] | None:
    """The TorchScript exporter's `dynamic_axes` for the plan's ranged dims."""
    axes: dict[str, dict[int, str]] = {}
    for d in plan.ranged:
        for inp, axis in d.axes:
            axes.setdefault(inp, {})[axis] = d.name
    return axes or None


def _rename_in(dim: onnx.TensorShapeProto.Dimension, mapping: dict[str, str],
               pattern: re.Pattern | None) -> None:
    if dim.HasField("dim_param") and pattern is not None:
        dim.dim_param = pattern.sub(lambda m: mapping[m.group(0)], dim.dim_param)


def name_graph_dims(model: onnx.ModelProto, dims: Sequence[DimRange]) -> None:
    """Give every ranged axis of the graph's inputs its dim's name, and rename that dim's old
    symbol (the exporter's `s77`) to it wherever it appears: outputs and value info too."""
    inputs = {vi.name: vi for vi in model.graph.input}
    mapping: dict[str, str] = {}
    for d in dims:
        for inp, axis in d.axes:
            vi = inputs.get(inp)
            if vi is None or axis >= len(vi.type.tensor_type.shape.dim):
                continue
            dim = vi.type.tensor_type.shape.dim[axis]
            if dim.HasField("dim_param") and dim.dim_param and dim.dim_param != d.name:
                mapping[dim.dim_param] = d.name
            if not dim.HasField("dim_value"):
                dim.dim_param = d.name
    if not mapping:
        return
    pattern = re.compile(r"\b(" + "|".join(re.escape(k) for k in sorted(mapping, key=len,
                                                                          reverse=True)) + r")\b")
    for vi in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        for dim in vi.type.tensor_type.shape.dim:
            _rename_in(dim, mapping, pattern)


def _is_named(dim: onnx.TensorShapeProto.Dimension, names: set[str]) -> bool:
    if dim.HasField("dim_value"):
        return True
    return bool(dim.dim_param) and set(re.findall(r"[A-Za-z_]\w*", dim.dim_param)) <= names


def _weights_as_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph without its large weights' bytes: each becomes a graph input of its shape
    (shape inference reads the values of small, shape-like constants only)."""
    from export_gelu.graph import skeleton

    fields = ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
              "uint64_data", "string_data")
    sk = skeleton(model)
    stubs = [t for t in sk.graph.initializer if int(np.prod(t.dims)) > 0
             and not any(len(getattr(t, f)) for f in fields)]
    stub_names = {t.name for t in stubs}
    kept = [t for t in sk.graph.initializer if t.name not in stub_names]
    del sk.graph.initializer[:]
    sk.graph.initializer.extend(kept)
    sk.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                          for t in stubs)
    return sk


def name_output_dims(model: onnx.ModelProto, dims: Sequence[DimRange]) -> str | None:
    """Outputs whose dims the exporter left unnamed (`Reshape552_dim_0`) get them from ONNX
    Runtime's symbolic shape inference, run on the graph without its large weights; returns a
    note when that could not be done."""
    names = {d.name for d in dims}
    if not names or all(_is_named(d, names) for o in model.graph.output
                        for d in o.type.tensor_type.shape.dim):
        return None
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inferred = SymbolicShapeInference.infer_shapes(_weights_as_inputs(model),
                                                       auto_merge=True)
    except Exception as exc:  # noqa: BLE001 - optional help; the graph stays valid without it
        return (f"output dims left as the exporter named them (symbolic shape inference: "
                f"{type(exc).__name__})")
    found = {o.name: o for o in inferred.graph.output}
    for out in model.graph.output:
        new = found.get(out.name)
        if new is None:
            continue
        new_dims = new.type.tensor_type.shape.dim
        old_dims = out.type.tensor_type.shape.dim
        if len(new_dims) != len(old_dims):
            continue
        for old, nd in zip(old_dims, new_dims):
            if not _is_named(old, names) and _is_named(nd, names):
                old.CopyFrom(nd)
    return None


def static_ranged_axes(model: onnx.ModelProto, dims: Sequence[DimRange]) -> list[str]:
    """Ranged input axes the exported graph made static (each `input:axis=size`)."""
    named = onnx_named_axes(model)
    return [f"{inp}:{axis}={named[inp][axis]}" for d in dims if d.min < d.max
            for inp, axis in d.axes if inp in named and axis < len(named[inp])
            and isinstance(size := named[inp][axis], int) and size > 0]
