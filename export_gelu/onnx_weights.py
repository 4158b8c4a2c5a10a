"""Big ONNX weights that stay in their file: loaded as references, read on demand, streamed.

A model whose weights live in external data is loaded as its graph (`load_graph`): tensors
of `INLINE_LIMIT` bytes or more keep their external-data reference, with a `basepath` entry
naming the folder it is relative to (a key the ONNX external-data format reserves for this),
so that every pass runs on the graph alone. Whoever needs one of their values reads it with
`tensor_array`; ONNX Runtime runs such a graph from bytes with its weights read from their
folder (`ort_source`); the output's external data is written by copying each tensor's bytes
from its file, a chunk at a time (`stream_weights`). Peak memory is the graph plus one chunk,
whatever the weights weigh (docs/big-models.md).
"""

from __future__ import annotations

import copy
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx.external_data_helper import load_external_data_for_tensor

from export_gelu.fspaths import utf8_alias
from export_gelu.onnx_file import copy_structure

#: Tensors of at least this many bytes stay in their file when a graph is loaded.
INLINE_LIMIT = 1 << 20
#: Tensors of at least this many bytes start at a multiple of ALIGNMENT in written data, so
#: ONNX Runtime can memory-map them.
ALIGN_FROM = 1 << 16
ALIGNMENT = 1 << 16
#: Bytes copied per read while streaming.
CHUNK = 16 << 20
BASEPATH = "basepath"


#: Where a tensor sits (`_model_tensors`): what `stream_weights` may move out of a graph.
INITIALIZER, ATTRIBUTE, OTHER = "initializer", "attribute", "other"


def _attribute_tensors(attr: onnx.AttributeProto, other: bool) -> Iterator[tuple[TensorProto, str]]:
    """Tensors an attribute holds: dense, sparse (its values and indices), in subgraphs."""
    kind = OTHER if other else ATTRIBUTE
    if attr.type == onnx.AttributeProto.TENSOR:
        yield attr.t, kind
    elif attr.type == onnx.AttributeProto.TENSORS:
        for t in attr.tensors:
            yield t, kind
    elif attr.type == onnx.AttributeProto.SPARSE_TENSOR:
        yield from _sparse_parts(attr.sparse_tensor)
    elif attr.type == onnx.AttributeProto.SPARSE_TENSORS:
        for sparse in attr.sparse_tensors:
            yield from _sparse_parts(sparse)
    elif attr.type == onnx.AttributeProto.GRAPH:
        yield from _graph_tensors(attr.g, other)
    elif attr.type == onnx.AttributeProto.GRAPHS:
        for g in attr.graphs:
            yield from _graph_tensors(g, other)


def _sparse_parts(sparse: onnx.SparseTensorProto) -> Iterator[tuple[TensorProto, str]]:
    yield sparse.values, OTHER
    yield sparse.indices, OTHER


def _nodes_tensors(nodes: Iterable[onnx.NodeProto], other: bool
                   ) -> Iterator[tuple[TensorProto, str]]:
    for node in nodes:
        for attr in node.attribute:
            yield from _attribute_tensors(attr, other)


def _graph_tensors(graph: onnx.GraphProto, other: bool = False
                   ) -> Iterator[tuple[TensorProto, str]]:
    for t in graph.initializer:
        yield t, OTHER if other else INITIALIZER
    for sparse in graph.sparse_initializer:
        yield from _sparse_parts(sparse)
    yield from _nodes_tensors(graph.node, other)


def _model_tensors(model: onnx.ModelProto) -> Iterator[tuple[TensorProto, str]]:
    """(tensor, where it sits) for every tensor anywhere in the model: the main graph's
    (and its subgraphs') initializers and attributes; OTHER for sparse tensors' parts, local
    functions' bodies and training graphs (moved to external data only when already lazy)."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        yield from _nodes_tensors(function.node, other=True)
    for info in model.training_info:
        yield from _graph_tensors(info.initialization, other=True)
        yield from _graph_tensors(info.algorithm, other=True)


def all_tensors(model: onnx.ModelProto) -> Iterator[TensorProto]:
    """Every tensor of the model, wherever it is: initializers and sparse initializers,
    tensor and sparse-tensor attributes, subgraphs (of nodes and of local functions), local
    functions' bodies, training graphs. Whatever can point at external data is here."""
    for t, _where in _model_tensors(model):
        yield t


def _entries(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def is_external(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL


def is_lazy(t: TensorProto) -> bool:
    """A tensor whose bytes are still in a file (loaded by `load_graph`)."""
    return is_external(t) and BASEPATH in _entries(t)


def _set_entries(t: TensorProto, entries: dict[str, str]) -> None:
    del t.external_data[:]
    for key, value in entries.items():
        e = t.external_data.add()
        e.key, e.value = key, value


def _span(t: TensorProto) -> tuple[Path, int, int]:
    """(file, offset, length) of an external tensor's bytes."""
    info = _entries(t)
    path = Path(info.get(BASEPATH, "")) / info["location"]
    offset = int(info.get("offset", 0))
    length = int(info["length"]) if "length" in info else path.stat().st_size - offset
    return path, offset, length


def load_graph(path: str | Path, inline_limit: int = INLINE_LIMIT) -> onnx.ModelProto:
    """`path` with tensors under `inline_limit` bytes read in and the rest left in their
    external-data file (each marked with the folder it is relative to)."""
    path = Path(path)
    model = copy_structure(path)
    base = utf8_alias(path.resolve().parent)  # a protobuf string: UTF-8
    for t in all_tensors(model):
        if not is_external(t):
            continue
        _file, _offset, length = _span(_with_base(t, base))
        if length < inline_limit:
            _drop_base(t)
            load_external_data_for_tensor(t, base)
    return model


def _with_base(t: TensorProto, base: str) -> TensorProto:
    entries = _entries(t)
    entries[BASEPATH] = base
    _set_entries(t, entries)
    return t


def _drop_base(t: TensorProto) -> None:
    entries = _entries(t)
    entries.pop(BASEPATH, None)
    _set_entries(t, entries)


def tensor_array(t: TensorProto) -> np.ndarray:
    """The tensor's values, read from its file when it is lazy."""
    if is_lazy(t):
        return numpy_helper.to_array(t, _entries(t)[BASEPATH])
    return numpy_helper.to_array(t)


def lazy_tensors(model: onnx.ModelProto) -> list[TensorProto]:
    return [t for t in all_tensors(model) if is_lazy(t)]


def lazy_bytes(model: onnx.ModelProto) -> int:
    return sum(_span(t)[2] for t in lazy_tensors(model))


def lazy_folder(model: onnx.ModelProto) -> str | None:
    """The one folder the lazy tensors' locations are relative to (None: no lazy tensor)."""
    folders = {_entries(t)[BASEPATH] for t in lazy_tensors(model)}
    if len(folders) > 1:
        raise ValueError(f"lazy tensors from several folders: {sorted(folders)}")
    return next(iter(folders), None)


def ort_source(model: onnx.ModelProto) -> tuple[bytes, str | None]:
    """(serialized model, folder of its lazy weights or None) for an ONNX Runtime session:
    the `basepath` entries, which ONNX Runtime refuses, are left out of the bytes."""
    folder = lazy_folder(model)
    if folder is None:
        return model.SerializeToString(), None
    light = copy.deepcopy(model)  # the graph only: lazy tensors carry no bytes
    for t in lazy_tensors(light):
        _drop_base(t)
    return light.SerializeToString(), folder


def checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy onnx.checker can check in memory: lazy initializers become typed graph inputs
    (the checker would look for their files relative to the working directory)."""
    if lazy_folder(model) is None:
        return model
    light = copy.deepcopy(model)
    keep = [t for t in light.graph.initializer if not is_lazy(t)]
    moved = [t for t in light.graph.initializer if is_lazy(t)]
    del light.graph.initializer[:]
    light.graph.initializer.extend(keep)
    declared = {i.name for i in light.graph.input}
    for t in moved:
        if t.name not in declared:
            light.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type,
                                                                        list(t.dims)))
    return light


def materialize(model: onnx.ModelProto) -> None:
    """Read every lazy tensor into the model (for graphs small enough to hold)."""
    for t in lazy_tensors(model):
        base = _entries(t)[BASEPATH]
        _drop_base(t)
        load_external_data_for_tensor(t, base)


# -- writing ------------------------------------------------------------------------------

_NAN_DTYPES: dict[int, type] = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16,
               TensorProto.DOUBLE: np.float64}


class NanWeightError(ValueError):
    """A streamed weight holds NaN (the model is corrupt)."""


class TruncatedWeightsError(ValueError):
    """A weight's file ends before its bytes do (the input changed under the run)."""


@dataclass
class WrittenWeights:
    """What `stream_weights` wrote: tensors, bytes, the data file's SHA-256, seconds."""

    tensors: int = 0
    bytes: int = 0
    streamed: int = 0  # of the tensors, those copied from a file
    sha256: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {"tensors": self.tensors, "bytes": self.bytes, "streamed": self.streamed,
                "sha256": self.sha256, "seconds": round(self.seconds, 3)}


class _Writer:
    def __init__(self, fh: BinaryIO, on_bytes: Callable[[int], None] | None) -> None:
        self.fh = fh
        self.sha = hashlib.sha256()
        self.pos = 0
        self.on_bytes = on_bytes

    def write(self, data: bytes | memoryview) -> None:
        self.fh.write(data)
        self.sha.update(data)
        self.pos += len(data)
        if self.on_bytes is not None:
            self.on_bytes(len(data))

    def pad_to(self, alignment: int) -> None:
        extra = -self.pos % alignment
        if extra:
            self.write(b"\0" * extra)


def _copy_span(src: Path, offset: int, length: int, out: _Writer, name: str,
               nan_dtype: type | None) -> None:
    with open(src, "rb") as fh:
        fh.seek(offset)
        left = length
        while left:
            chunk = fh.read(min(CHUNK, left))
            if not chunk:  # the file shrank since it was checked
                raise TruncatedWeightsError(f"{src}: ends before the {length} bytes of tensor "
                                            f"{name!r} (was it changed during the run?)")
            if nan_dtype is not None and len(chunk) % np.dtype(nan_dtype).itemsize == 0 \
                    and np.isnan(np.frombuffer(chunk, dtype=nan_dtype)).any():
                raise NanWeightError(f"{src}: initializer {name!r} holds NaN (a corrupt model); "
                                     "its outputs could not be verified")
            out.write(chunk)
            left -= len(chunk)


def _inline_bytes(t: TensorProto) -> bytes:
    return t.raw_data if t.raw_data else numpy_helper.to_array(t).tobytes()


def _clear_inline(t: TensorProto) -> None:
    for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
              "uint64_data", "string_data"):
        t.ClearField(f)


def stream_weights(model: onnx.ModelProto, data_path: Path, location: str,
                   size_threshold: int = 1024,
                   on_bytes: Callable[[int], None] | None = None, *,
                   inline_attributes: bool = True) -> WrittenWeights:
    """Write every lazy tensor, and every inline initializer (and, with `inline_attributes`,
    tensor attribute) of `size_threshold` bytes or more, into `data_path`; point them at
    `location` there. Lazy bytes are copied a chunk at a time from their file (float ones
    checked for NaN on the way); inline bytes move out of the model. Returns what was
    written, with the SHA-256 of the whole data file. `location` is only written into the
    graph: nothing is resolved against it (nor against the working directory)."""
    start = time.perf_counter()
    written = WrittenWeights()
    with open(data_path, "wb") as fh:
        out = _Writer(fh, on_bytes)
        for t, where in _model_tensors(model):
            lazy = is_lazy(t)
            movable = where == INITIALIZER or (where == ATTRIBUTE and inline_attributes)
            if not lazy and (not movable or t.data_type == TensorProto.STRING
                             or is_external(t) or len(_inline_bytes(t)) < size_threshold):
                continue
            if lazy:
                src, offset, length = _span(t)
            else:
                data = _inline_bytes(t)
                length = len(data)
            if length >= ALIGN_FROM:
                out.pad_to(ALIGNMENT)
            at = out.pos
            if lazy:
                _copy_span(src, offset, length, out, t.name, _NAN_DTYPES.get(t.data_type))
                written.streamed += 1
            else:
                out.write(data)
                _clear_inline(t)
            t.data_location = TensorProto.EXTERNAL
            _set_entries(t, {"location": location, "offset": str(at), "length": str(length)})
            written.tensors += 1
        fh.flush()
        os.fsync(fh.fileno())
    written.bytes = out.pos
    written.sha256 = out.sha.hexdigest()
    written.seconds = time.perf_counter() - start
    return written


def point_at(model: onnx.ModelProto, folder: Path) -> None:
    """Mark the model's external tensors as relative to `folder` (after it was saved there),
    so later reads find the bytes in the written file."""
    for t in all_tensors(model):
        if is_external(t):
            _with_base(t, utf8_alias(folder.resolve()))
