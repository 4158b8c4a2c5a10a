"""The graphs a Hugging Face task exports, each a small module around the loaded model that
takes and returns plain tensors, with its inputs, output names and dynamic dims.

Names follow optimum's ONNX export and ONNX Runtime GenAI:

- one-graph tasks: the model's inputs (`input_ids`, `attention_mask`, `pixel_values`, ...)
  and its output fields (`last_hidden_state`, `logits`, `start_logits`, ...);
- a decoder with past (`text-generation-with-past`): `input_ids`, `attention_mask` (over past
  and new tokens), `position_ids` where the model takes them, `past_key_values.N.key` /
  `.value` in; `logits`, `present.N.key` / `.value` out; dims `batch`, `sequence_length`,
  `past_sequence_length`, `total_sequence_length` (= past + new);
- an encoder–decoder: three graphs (hf/seq2seq.py).

Each graph's dims are tried before anything is written (hf/dim_probe.py).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.errors import BadInputError
from export_gelu.exporter.hf import inputs as hi
from export_gelu.exporter.hf.cache import (
    NotKeyValueCache,
    cache_configs,
    cache_off,
    cache_parameter,
    dynamic_cache,
    returned_cache,
    split_cache,
)
from export_gelu.exporter.hf.dim_probe import capturable_dims, capture_keeping_all
from export_gelu.exporter.hf.folder import FolderModel
from export_gelu.exporter.hf.graph_spec import (
    BATCH_RANGE,
    PAST,
    GraphDim,
    GraphSpec,
    forward_params,
    positional_module,
    tensor_fields,
)
from export_gelu.exporter.hf.seq2seq import seq2seq_graphs
from export_gelu.exporter.hf.sizes import SizeDims, size_dims
from export_gelu.exporter.hf.tasks import DECODER, SEQ2SEQ, WITH_PAST
from export_gelu.notes import Note

if TYPE_CHECKING:
    import torch

    from export_gelu.exporter.torch_values import TensorFeed

# -- one graph ---------------------------------------------------------------------------------

def _task_module(model: torch.nn.Module, input_names: list[str], output_names: list[str]
                 ) -> torch.nn.Module:
    import torch

    class TaskOutputs(torch.nn.Module):
        """The model called by keyword, returning its chosen output fields as a tuple."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
            out = self.model(**dict(zip(input_names, tensors)), return_dict=True)
            return tuple(out[n] for n in output_names)

    return positional_module(TaskOutputs, input_names)


def given_inputs(fm: FolderModel, specs: list[str], npz: str | None
                 ) -> TensorFeed | None:
    """The user's `--input` specs (ids inside the config's vocabulary) or `--inputs` file as
    torch tensors, checked against `forward()`'s parameters; None when neither is given."""
    import torch

    from export_gelu.exporter.inputs.generated import generate_inputs
    from export_gelu.exporter.inputs.specs import load_npz, parse_input_spec

    if not specs and not npz:
        return None
    if npz:
        arrays = OrderedDict(load_npz(npz))
    else:
        parsed = [parse_input_spec(s) for s in specs]
        arrays = generate_inputs(parsed, hi.hints(fm.config, [p.name for p in parsed]))
    accepts = forward_params(fm.model)
    unknown = [n for n in arrays if n not in accepts]
    if unknown:
        raise BadInputError(f"{fm.folder}: {fm.task.class_name}.forward() takes no "
                            f"{', '.join(unknown)} (it takes {', '.join(sorted(accepts))})")
    return OrderedDict((n, torch.from_numpy(np.ascontiguousarray(a))) for n, a in arrays.items())


def single_graph(fm: FolderModel, given: TensorFeed | None = None,
                 static: bool = False, sizes_opset: int = 0,
                 sizes_precision: str = "fp32") -> GraphSpec:
    """A one-graph task: the model's inputs (the user's `given` ones, else made from its
    config), its tensor output fields; dynamic in batch and sequence (optimum's dim names)
    unless `static` or the user gave the inputs; image and audio sizes too where the model
    takes them and the export's opset (`sizes_opset`) is the dynamo exporter's (hf/sizes.py)."""
    import torch

    model, config = fm.model, fm.config
    for asks in cache_configs(model):  # every sub-config's too (a VisionEncoderDecoder's)
        asks.use_cache = False
    if given is None:
        requests = fm.requests or hi.main_requests(model, config, fm.preprocessor,
                                                   forward_params(model), fm.task.name)
    inputs = given if given is not None else hi.make(requests, config)
    made = "the inputs given" if given is not None else "inputs made from its config"
    try:
        with torch.no_grad():
            out = model(**inputs, return_dict=True)
    except Exception as exc:  # noqa: BLE001 - the model refuses inputs made from its config
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        hint = "" if given is not None else "; pass --input for each"
        raise BadInputError(f"{fm.folder}: {fm.task.class_name} does not run on {made} "
                            f"({', '.join(inputs)}): {type(exc).__name__}: {first}{hint}"
                            ) from exc
    names = tensor_fields(out)
    module = _task_module(model, list(inputs), names)
    dims: list[GraphDim] = []
    probed = None
    if not static and given is None:
        sizes = size_dims(model, lambda m: _task_module(m, list(inputs), names), inputs,
                          (BATCH_RANGE[0], BATCH_RANGE[2]), sizes_opset, sizes_precision)
        fm.notes.extend(Note(f"{s.input_name} keeps its example size: {s.why_static}",
                             "static-size") for s in sizes if s.why_static)
        dims = one_graph_dims(inputs, config, fm.task.name, sizes)
        if not _captured_already(inputs, sizes):
            dims, static_notes, probed = capturable_dims(module, inputs, dims)
            fm.notes.extend(static_notes)
    return GraphSpec("model.onnx", module, inputs, names, dims, probed=probed)


def _captured_already(inputs: TensorFeed, sizes: Sequence[SizeDims]) -> bool:
    """The sizes probe (hf/sizes.py) captured this graph's every dim already: one input,
    whose batch and size axes it kept symbolic."""
    return len(inputs) == 1 and bool(sizes) and all(s.rows and s.batch_kept for s in sizes)


#: Inputs whose last axis is the token sequence (optimum: `sequence_length`).
_TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "position_ids")


def one_graph_dims(inputs: TensorFeed, config: object, task: str,
                   sizes: Sequence[SizeDims] = ()) -> list[GraphDim]:
    """A one-graph task's dynamic dims, named as optimum names them: `batch_size` on every
    input's first axis, `sequence_length` on the token inputs' last axis (after
    `num_choices`, kept at its size, for multiple-choice), and an image's `height` and
    `width` or raw audio's `sequence_length` where the model takes other sizes (`sizes`,
    hf/sizes.py)."""
    batch = GraphDim("batch_size", BATCH_RANGE[0], BATCH_RANGE[1], BATCH_RANGE[2],
                     axes=tuple((n, 0) for n in inputs), checked=True)
    media = [GraphDim(d, low, opt, high, axes=((s.input_name, axis),), checked=True)
             for s in sizes for d, low, opt, high, axis in s.rows]
    text = [n for n in inputs if n in _TEXT_INPUTS and inputs[n].dim() >= 2]
    if not text:
        return [batch, *media]
    axis = inputs[text[0]].dim() - 1
    seq = int(inputs[text[0]].shape[axis])
    top = max(seq, hi.sequence_length(config, 10_000))
    return [batch, GraphDim("sequence_length", 1, seq, top, axes=tuple((n, axis) for n in text),
                            checked=True), *[m for m in media if m.name != "sequence_length"]]


# -- a decoder with past -----------------------------------------------------------------------

def _kv_shape(model: torch.nn.Module, batch: int, past: int) -> tuple[int, int, int, int]:
    """(batch, heads, past, head size) of the key/values the model caches, from one call."""
    import torch

    ids = torch.zeros((batch, 1), dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, return_dict=True)
    pairs, _cross = split_cache(returned_cache(out))
    if not pairs:
        raise BadInputError(f"{type(model).__name__} returns no key/value cache: it has no "
                            "-with-past graph (export it without -with-past)")
    key = pairs[0][0]
    return batch, int(key.shape[1]), past, int(key.shape[-1])


def _decoder_module(model: torch.nn.Module, input_names: list[str], layers: int
                    ) -> torch.nn.Module:
    import torch
    cache_kw = cache_parameter(model)
    first_past = next(i for i, n in enumerate(input_names) if n.startswith("past_key_values"))

    class DecoderWithPast(torch.nn.Module):
        """The decoder called with a DynamicCache built from the past tensors; its logits and
        the updated cache's tensors out."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
            named = dict(zip(input_names[:first_past], tensors[:first_past]))
            past = tensors[first_past:]
            pairs = [(past[2 * i], past[2 * i + 1]) for i in range(layers)]
            out = self.model(**named, **{cache_kw: dynamic_cache(pairs)}, use_cache=True,
                             return_dict=True)
            present, _cross = split_cache(returned_cache(out))
            return (out.logits, *(t for pair in present for t in pair))

    return positional_module(DecoderWithPast, input_names)


def decoder_graph(fm: FolderModel) -> GraphSpec:
    """`text-generation-with-past`: one graph for every step of the generation loop (the
    prompt with an empty past, then a token at a time)."""
    import torch

    model, config = fm.model, fm.config
    accepts = forward_params(model)
    seq = hi.sequence_length(config, 4)
    limit = hi.sequence_length(config, 10_000) + 2
    shape = _kv_shape(model, hi.BATCH, PAST)
    layers = len(split_cache(returned_cache(_one_step(model)))[0])
    ids = hi.make([hi.Request("input_ids", (hi.BATCH, seq), hi.INT64)], config)["input_ids"]
    inputs: TensorFeed = OrderedDict(input_ids=ids)
    inputs["attention_mask"] = torch.ones((hi.BATCH, PAST + seq), dtype=torch.long)
    if "position_ids" in accepts:
        inputs["position_ids"] = torch.arange(PAST, PAST + seq).repeat(hi.BATCH, 1)
    gen = torch.Generator().manual_seed(0)
    for i in range(layers):
        for kind in ("key", "value"):
            inputs[f"past_key_values.{i}.{kind}"] = torch.randn(shape, generator=gen)
    names = ["logits"] + [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    top = max(limit - 1, PAST + seq)
    dims = [GraphDim("batch", *BATCH_RANGE, axes=tuple((n, 0) for n in inputs)),
            GraphDim("sequence_length", 1, seq, max(seq, top // 2),
                     axes=(("input_ids", 1),) + ((("position_ids", 1),)
                                                 if "position_ids" in inputs else ())),
            GraphDim("past_sequence_length", 1, PAST, max(PAST, top // 2),
                     axes=tuple((n, 2) for n in inputs if n.startswith("past_key_values"))),
            GraphDim("total_sequence_length", 2, PAST + seq, 2 * max(PAST, top // 2),
                     axes=(("attention_mask", 1),), derived=True)]
    return GraphSpec("model.onnx", _decoder_module(model, list(inputs), layers), inputs, names,
                     dims, role="decoder_with_past")


def _one_step(model: torch.nn.Module) -> object:
    import torch

    with torch.no_grad():
        return model(input_ids=torch.zeros((1, 1), dtype=torch.long), use_cache=True,
                     return_dict=True)


def _probed_at(spec: GraphSpec, precision: str) -> GraphSpec | None:
    """`spec` with the probe's capture made on a copy cast to `precision` (fp16/bf16), which
    the export then takes (capture/capture.py's module_for_precision) instead of capturing
    the cast module once more; None where that one capture does not keep every declared dim
    (the fp32 probe then decides, as before), or where the weights are too big to hold twice
    (COPY_LIMIT_BYTES)."""
    from export_gelu.exporter.precision_cast import cast_args, cast_copy
    from export_gelu.exporter.saving.weight_size import COPY_LIMIT_BYTES, module_weight_bytes

    if precision not in ("fp16", "bf16") or module_weight_bytes(spec.module) > COPY_LIMIT_BYTES:
        return None
    inputs: TensorFeed = OrderedDict(zip(spec.inputs, cast_args(tuple(spec.inputs.values()),
                                                                precision)))
    probed = capture_keeping_all(cast_copy(spec.module, precision), inputs, spec.dims)
    if probed is None:
        return None
    return dataclasses.replace(spec, probed=dataclasses.replace(probed, precision=precision))


def _probed(fm: FolderModel, spec: GraphSpec, precision: str = "fp32") -> GraphSpec:
    """`spec` with the dims its module can be captured with (hf/dim_probe.py); a note for
    each one kept static or left to torch, named after the graph's file. An fp16/bf16
    export's graph is probed at that precision first, where every declared dim holds."""
    at_precision = _probed_at(spec, precision)
    if at_precision is not None:
        return at_precision
    dims, notes, probed = capturable_dims(spec.module, spec.inputs, spec.dims)
    stem = spec.file_name.removesuffix(".onnx")
    fm.notes.extend(Note(f"{stem}: {n}", getattr(n, "code", "static-dim")) for n in notes)
    return dataclasses.replace(spec, dims=dims, probed=probed)


def graphs_for(fm: FolderModel, given: TensorFeed | None = None,
               static: bool = False, sizes_opset: int = 0,
               sizes_precision: str = "fp32") -> list[GraphSpec]:
    """Every graph the folder's task exports (a one-graph task on the user's `given`
    inputs, when there are any; static in every dim with `static`)."""
    kind = fm.task.kind
    if kind == DECODER and fm.task.with_past:
        try:
            return [_probed(fm, decoder_graph(fm), sizes_precision)]
        except NotKeyValueCache as exc:  # Mamba: a state cache, no key/values to pass
            plain = fm.task.name.removesuffix(WITH_PAST)
            fm.notes.append(Note(f"{fm.task.class_name}: no {fm.task.name} graph ({exc}); "
                                 f"exported as {plain}, one graph without a cache (the "
                                 "generation loop runs it on the whole sequence each step)",
                                 "no-kv-cache"))
            fm.task = dataclasses.replace(fm.task, name=plain, with_past=False)
    if kind == SEQ2SEQ:
        return [_probed(fm, spec, sizes_precision) for spec in seq2seq_graphs(fm)]
    if kind == DECODER:
        cache_off(fm.config)
    return [single_graph(fm, given, static, sizes_opset, sizes_precision)]
