"""Realistic inputs for a model, made by what each input is for (its role), not only its dtype.

One entry point, `generate_inputs(requests, hints)`: every input export-gelu makes up (the
feed at OPT, every shape parity runs at, `verify`, `--compare-forms`, the device bundle) comes
from here. Roles, read from the input's name and dtype (docs/dynamic-shapes.md, "Generated
inputs"):

- token ids (`input_ids`, `decoder_input_ids`, any other integer `*_ids`, or an integer input
  that indexes the model's embedding table): uniform over the table's rows, so every id is
  inside the vocabulary;
- attention masks (`attention_mask`, `decoder_attention_mask`, any `*mask` but a head mask):
  a padding pattern, each row a prefix of ones (the first row all ones) and zeros after, never a
  row with nothing to attend to;
- token types (`token_type_ids`, `segment_ids`): a segment of 0 then a segment of 1 per row
  (0 only when the model has one type);
- position ids: 0, 1, 2, … along the last axis;
- floats (pixels, audio features, embeddings): normal noise at the shape asked for.

An explicit `--input NAME:SHAPE:DTYPE:LOW,HIGH` range is used as given (uniform in it), and
`--inputs FILE.npz` or a model's own example inputs are never replaced: this module only makes
the inputs nobody gave.
"""

from __future__ import annotations

import functools
import os
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from export_gelu.exporter.inputs.specs import DEFAULT_INT_RANGE, InputSpec, make_input

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Mapping
    from pathlib import Path

    import torch

TOKEN_IDS, MASK, TOKEN_TYPES, POSITIONS = "token ids", "attention mask", "token types", "positions"
_TYPES = re.compile(r"(^|_)(token_type|segment)(_ids?)?$")
_POSITIONS = re.compile(r"(^|_)position_ids?$")
_IDS = re.compile(r"(^|_)ids?$")
#: ONNX/fx ops an index passes through unchanged on its way to an embedding lookup.
_INDEX_PASSTHROUGH = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity",
                      "Expand"}


@dataclass
class ModelHints:
    """What the model tells about its inputs' values: the embedding tables they index."""

    vocab: dict[str, int] = field(default_factory=dict)  # input → rows of the table it indexes
    input_vocab: int | None = None  # the model's token embedding table (its vocabulary)
    type_vocab: int | None = None  # rows of its token-type table
    example_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # [min, max+1)


class GeneratedFeed(OrderedDict[str, np.ndarray]):
    """The arrays, in request order; `generated` says how each was made (name → words)."""

    generated: dict[str, str]

    def __init__(self, *args: Mapping[str, np.ndarray] | Iterable[tuple[str, np.ndarray]],
                 **kwargs: np.ndarray) -> None:
        super().__init__(*args, **kwargs)
        self.generated = {}


def role(name: str, dtype: np.dtype, hints: ModelHints | None = None) -> str | None:
    """The role an input's name and dtype give it (None: no role, made by dtype alone)."""
    low = name.lower()
    if "mask" in low and "head" not in low:
        return MASK
    if dtype.kind not in "iu":
        return None
    if _TYPES.search(low):
        return TOKEN_TYPES
    if _POSITIONS.search(low):
        return POSITIONS
    if _IDS.search(low) or (hints is not None and name in hints.vocab):
        return TOKEN_IDS
    return None


def _padding_mask(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator
                  ) -> tuple[np.ndarray, str]:
    if len(shape) < 2 or shape[-1] < 1:
        return np.ones(shape, dtype), "ones"
    rows = int(np.prod(shape[:-1]))
    length = shape[-1]
    lengths = rng.integers(1, length + 1, size=rows)
    lengths[0] = length  # one full row, as a batch padded to its longest sequence has
    mask = (np.arange(length)[None, :] < lengths[:, None]).reshape(shape)
    return mask.astype(dtype), ("padding: each row a prefix of ones (≥ 1 attended "
                                "position, the first row all ones), zeros after")


def _segments(shape: tuple[int, ...], dtype: np.dtype, types: int | None,
              rng: np.random.Generator) -> tuple[np.ndarray, str]:
    if not shape or shape[-1] < 2 or (types is not None and types < 2):
        return np.zeros(shape, dtype), "segments: all 0 (one segment)"
    rows = int(np.prod(shape[:-1]))
    split = rng.integers(1, shape[-1], size=rows)
    seg = (np.arange(shape[-1])[None, :] >= split[:, None]).reshape(shape)
    return seg.astype(dtype), "segments: 0 then 1 per row"


def _positions(shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, str]:
    if not shape:
        return np.zeros(shape, dtype), "position 0"
    return (np.broadcast_to(np.arange(shape[-1]), shape).astype(dtype),
            f"positions 0..{shape[-1] - 1} per row")


def _token_ids(req: InputSpec, hints: ModelHints, rng: np.random.Generator
               ) -> tuple[np.ndarray, str]:
    rows = hints.vocab.get(req.name) or hints.input_vocab
    if rows:
        high, why = rows, "the embedding table's rows"
    elif req.name in hints.example_ranges:
        (low, high), why = hints.example_ranges[req.name], "the example inputs' range"
        return (rng.integers(low, high, size=req.shape).astype(req.dtype),
                f"token ids, uniform in [{low}, {high}) ({why})")
    else:
        high, why = DEFAULT_INT_RANGE[1], "no embedding table found"
    high = min(high, int(np.iinfo(req.dtype).max) + 1)
    return (rng.integers(0, high, size=req.shape).astype(req.dtype),
            f"token ids, uniform in [0, {high}) ({why})")


def _one(req: InputSpec, kind: str | None, hints: ModelHints, rng: np.random.Generator
         ) -> tuple[np.ndarray, str]:
    """One input by its role; an explicit LOW,HIGH range is used as given."""
    if req.low is not None:
        return make_input(req, rng), f"uniform in [{req.low:g}, {req.high:g}) (--input range)"
    if kind == MASK:
        return _padding_mask(req.shape, req.dtype, rng)
    if kind == TOKEN_TYPES:
        return _segments(req.shape, req.dtype, hints.vocab.get(req.name) or hints.type_vocab,
                         rng)
    if kind == POSITIONS:
        return _positions(req.shape, req.dtype)
    if kind == TOKEN_IDS:
        return _token_ids(req, hints, rng)
    if req.dtype.kind == "b":
        return make_input(req, rng), "random 0/1"
    if req.dtype.kind in "iu":
        low, high = hints.example_ranges.get(req.name, DEFAULT_INT_RANGE)
        why = "the example inputs' range" if req.name in hints.example_ranges else "no role"
        return (rng.integers(low, high, size=req.shape).astype(req.dtype),
                f"integers, uniform in [{low}, {high}) ({why})")
    return make_input(req, rng), "normal noise (mean 0, std 1)"


def generate_inputs(requests: Sequence[InputSpec], hints: ModelHints | None = None,
                    seed: int = 0) -> GeneratedFeed:
    """The arrays for `requests` (name, shape, dtype and an optional explicit range), each made
    by its role; `.generated` says how. The same requests and seed give the same arrays."""
    hints = hints or ModelHints()
    kinds = [role(r.name, r.dtype, hints) for r in requests]
    if hints.input_vocab and TOKEN_IDS not in kinds:  # e.g. forward(x) with x the token ids
        first = next((i for i, (r, k) in enumerate(zip(requests, kinds))
                      if k is None and r.dtype.kind in "iu"), None)
        if first is not None:
            kinds[first] = TOKEN_IDS
    rng = np.random.default_rng(seed)
    feed = GeneratedFeed()
    for req, kind in zip(requests, kinds):
        feed[req.name], feed.generated[req.name] = _one(req, kind, hints, rng)
    return feed


# -- what the model says: the embedding tables its inputs index ---------------------------------

class HintSource(Protocol):
    """What the hints are read from: a loaded model (loading/loaded.py: LoadedModel)."""

    @property
    def is_onnx(self) -> bool: ...
    @property
    def path(self) -> Path: ...
    @property
    def exported(self) -> torch.export.ExportedProgram | None: ...
    @property
    def module(self) -> torch.nn.Module | None: ...
    @property
    def input_names(self) -> list[str]: ...
    @property
    def example_inputs(self) -> tuple[torch.Tensor, ...] | None: ...


def hints_for(loaded: HintSource) -> ModelHints:
    """ModelHints for a loaded model: an ONNX graph, an ExportedProgram or a module."""
    hints = ModelHints()
    try:
        if loaded.is_onnx:
            hints.vocab = onnx_vocab(loaded.path)
        elif loaded.exported is not None:
            names = loaded.input_names or []
            hints.vocab = program_vocab(loaded.exported, names)
        else:
            hints.input_vocab, hints.type_vocab = module_vocab(loaded.module) \
                if loaded.module is not None else (None, None)
    except Exception:  # noqa: BLE001 - hints only sharpen the values; without them, defaults
        pass
    if hints.input_vocab is None and hints.vocab:
        ids = [n for n in hints.vocab if role(n, np.dtype(np.int64)) == TOKEN_IDS]
        if len(set(hints.vocab[n] for n in ids)) == 1:
            hints.input_vocab = hints.vocab[ids[0]]
    for name, tensor in zip(loaded.input_names or [], loaded.example_inputs or ()):
        arr = tensor.detach().cpu().numpy() if hasattr(tensor, "detach") else np.asarray(tensor)
        if arr.dtype.kind in "iu" and arr.size:
            hints.example_ranges[name] = (int(arr.min()), int(arr.max()) + 1)
    return hints


def onnx_vocab(path: str | os.PathLike[str]) -> dict[str, int]:
    """Graph input → rows of the table a Gather looks it up in (through Cast, Reshape, …)."""
    stat = os.stat(path)
    return dict(_onnx_vocab(str(path), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=8)
def _onnx_vocab(path: str, _mtime: int, _size: int) -> tuple[tuple[str, int], ...]:
    """onnx_vocab, read once per version of the file (parity reads it at every shape)."""
    from export_gelu.onnx_file import read_structure

    model = read_structure(path)
    tables = {i.name: list(i.dims) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            tables[node.output[0]] = list(node.attribute[0].t.dims)
    inputs = {i.name for i in model.graph.input} - set(tables)
    origin = {n: n for n in inputs}  # tensor → the graph input it carries unchanged
    found: dict[str, int] = {}
    for node in model.graph.node:  # topological order
        if node.op_type in _INDEX_PASSTHROUGH and node.input and node.input[0] in origin:
            origin[node.output[0]] = origin[node.input[0]]
        elif node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in origin \
                and tables.get(node.input[0]):
            found.setdefault(origin[node.input[1]], int(tables[node.input[0]][0]))
    return tuple(found.items())


_FX_PASSTHROUGH = {"to", "_to_copy", "view", "reshape", "unsqueeze", "squeeze", "expand",
                   "clone", "contiguous", "alias", "_assert_tensor_metadata"}


def program_vocab(program: torch.export.ExportedProgram, names: Sequence[str]) -> dict[str, int]:
    """User input → rows of the table an `aten.embedding` looks it up in."""
    user = list(program.graph_signature.user_inputs)
    rename = dict(zip(user, names)) if len(names) == len(user) else {}
    origin: dict[torch.fx.Node, str] = {}
    found: dict[str, int] = {}
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in user:
            origin[node] = rename.get(node.name, node.name)
        elif node.op == "call_function":
            op = getattr(node.target, "__name__", str(node.target)).split(".")[0]
            args = [a for a in node.args if hasattr(a, "op")]
            if op == "embedding" and len(args) >= 2 and args[1] in origin:
                weight = args[0].meta.get("val")
                if weight is not None and weight.dim() == 2:
                    found.setdefault(origin[args[1]], int(weight.shape[0]))
            elif op in _FX_PASSTHROUGH and args and args[0] in origin:
                origin[node] = origin[args[0]]
    return found


def module_vocab(module: torch.nn.Module) -> tuple[int | None, int | None]:
    """(rows of the token embedding table, rows of the token-type table) of a module."""
    import torch

    vocab = types = None
    for _name, sub in module.named_modules():
        getter = getattr(sub, "get_input_embeddings", None)
        if callable(getter) and not isinstance(sub, torch.jit.ScriptModule):
            table = getter()
            if isinstance(table, torch.nn.Embedding):
                vocab = table.num_embeddings
                break
    tables = [(n, m) for n, m in module.named_modules() if _is_embedding(m)]
    for name, table in tables:
        rows = int(table.weight.shape[0])
        if "token_type" in name or "segment" in name:
            types = types or rows
        elif vocab is None and "position" not in name:
            vocab = rows
    return vocab, types


def _is_embedding(m: object) -> bool:
    import torch

    if isinstance(m, torch.nn.Embedding):
        return True
    return getattr(m, "original_name", None) == "Embedding" and hasattr(m, "weight")

