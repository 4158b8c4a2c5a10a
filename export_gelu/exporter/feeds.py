"""Decide the input arrays a run uses: flags, a `.npz`, the model's own examples, or the graph."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import onnx

from export_gelu.errors import BadInputError
from export_gelu.exporter.inputs import SPEC_HELP, load_npz, make_inputs, parse_input_spec
from export_gelu.exporter.load import LoadedModel

_ONNX_TO_NUMPY = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
                  onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32,
                  onnx.TensorProto.BOOL: np.bool_}


def onnx_graph_inputs(path: Path) -> list[tuple[str, list[int | str], int]]:
    """(name, dims, elem_type) of an ONNX file's real inputs (initializers excluded)."""
    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    found = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims: list[int | str] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                                 for d in tt.shape.dim]
        found.append((vi.name, dims, tt.elem_type))
    return found


def _feed_from_onnx(path: Path) -> OrderedDict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feed: OrderedDict[str, np.ndarray] = OrderedDict()
    for name, dims, elem in onnx_graph_inputs(path):
        if any(not isinstance(d, int) or d <= 0 for d in dims) or elem not in _ONNX_TO_NUMPY:
            shown = "x".join(str(d) for d in dims)
            raise BadInputError(
                f"{path}: input {name!r} has shape {shown} with symbolic dimensions or an "
                f"unsupported type; pass --input {SPEC_HELP}"
            )
        dtype = np.dtype(_ONNX_TO_NUMPY[elem])
        if dtype.kind == "f":
            feed[name] = rng.standard_normal(dims).astype(dtype)
        else:
            feed[name] = rng.integers(0, 2 if dtype.kind == "b" else 10, size=dims).astype(dtype)
    return feed


def resolve_feed(loaded: LoadedModel, specs: list[str], npz: str | Path | None
                 ) -> OrderedDict[str, np.ndarray]:
    """The named input arrays for this run, in the order the model takes them."""
    if specs and npz:
        raise BadInputError("give either --input specs or --inputs FILE.npz, not both")
    if npz:
        feed = OrderedDict(load_npz(npz))
    elif specs:
        feed = OrderedDict(make_inputs([parse_input_spec(s) for s in specs]))
    elif loaded.example_inputs is not None:
        names = loaded.input_names or [f"input_{i}" for i in range(len(loaded.example_inputs))]
        feed = OrderedDict((n, t.detach().cpu().numpy()) for n, t in
                           zip(names, loaded.example_inputs))
    elif loaded.is_onnx:
        feed = _feed_from_onnx(loaded.path)
    else:
        raise BadInputError(
            f"{loaded.path}: a {loaded.format.value} model carries no example inputs; "
            f"pass --input {SPEC_HELP} (one per forward() argument, in order) "
            "or --inputs FILE.npz"
        )
    if loaded.is_onnx:
        expected = [n for n, _d, _e in onnx_graph_inputs(loaded.path)]
        missing = [n for n in expected if n not in feed]
        if missing:
            raise BadInputError(f"{loaded.path}: no input given for {', '.join(missing)} "
                                f"(the graph takes {', '.join(expected)})")
        feed = OrderedDict((n, feed[n]) for n in expected)
    return feed
