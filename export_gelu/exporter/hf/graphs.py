"""The graphs a Hugging Face task exports, each a small module around the loaded model that
takes and returns plain tensors, with its inputs, output names and dynamic dims.

Names follow optimum's ONNX export and ONNX Runtime GenAI:

- one-graph tasks: the model's inputs (`input_ids`, `attention_mask`, `pixel_values`, ...)
  and its output fields (`last_hidden_state`, `logits`, `start_logits`, ...);
- a decoder with past (`text-generation-with-past`): `input_ids`, `attention_mask` (over past
  and new tokens), `position_ids` where the model takes them, `past_key_values.N.key` /
  `.value` in; `logits`, `present.N.key` / `.value` out; dims `batch`, `sequence_length`,
  `past_sequence_length`, `total_sequence_length` (= past + new);
- an encoder–decoder: `encoder_model.onnx` (→ `last_hidden_state`), `decoder_model.onnx`
  (first step: `input_ids`, `encoder_attention_mask`, `encoder_hidden_states` → `logits`,
  `present.N.decoder.key/value`, `present.N.encoder.key/value`) and, with past,
  `decoder_with_past_model.onnx` (also `past_key_values.N.decoder.key/value` and
  `.encoder.key/value` in; `logits`, `present.N.decoder.key/value` out).
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from export_gelu.errors import BadInputError
from export_gelu.exporter.hf import inputs as hi
from export_gelu.exporter.hf.cache import (
    cache_parameter,
    dynamic_cache,
    encoder_decoder_cache,
    returned_cache,
    split_cache,
)
from export_gelu.exporter.hf.folder import FolderModel
from export_gelu.exporter.hf.sizes import SizeDims, size_dims
from export_gelu.exporter.hf.tasks import (
    DECODER,
    DECODER_FILE,
    DECODER_WITH_PAST_FILE,
    ENCODER_FILE,
    SEQ2SEQ,
)
from export_gelu.notes import Note

#: Outputs no graph returns: the loss needs labels; hidden states and attentions are off.
_SKIPPED_OUTPUTS = {"loss", "hidden_states", "attentions", "cache", "past_key_values"}
#: Ranges of the generation graphs' dims: MIN:OPT:MAX (OPT is the example inputs' size).
BATCH_RANGE = (1, hi.BATCH, 8)
PAST = 8  # the example inputs' past length


@dataclass(frozen=True)
class GraphDim:
    """A named dynamic dim of a graph: its range and the input axes that carry it.
    `derived`: its size follows from other dims (total = past + new), so torch works it out.
    `checked`: parity runs at its MIN, OPT, an odd size and MAX (a one-graph task's dims)."""

    name: str
    min: int
    opt: int
    max: int
    axes: tuple[tuple[str, int], ...]
    derived: bool = False
    checked: bool = False


@dataclass
class GraphSpec:
    """One graph of an export: its file name, the module, its inputs, outputs and dims."""

    file_name: str
    module: Any
    inputs: OrderedDict[str, Any]  # name → torch tensor, in the graph's input order
    output_names: list[str]
    dims: list[GraphDim] = field(default_factory=list)
    role: str = "model"  # model | encoder | decoder | decoder_with_past


def _param(name: str) -> str:
    return name.replace(".", "_")


def positional_wrapper(base: type[Any], names: list[str]) -> type:
    """A subclass of `base` whose forward(*tensors) declares one parameter per input name, so
    torch.export binds its dynamic shapes and the exporters name the graph's inputs."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(_param(n), inspect.Parameter.POSITIONAL_OR_KEYWORD)
               for n in names]

    class Named(base):
        pass

    def forward(self: Any, *tensors: Any) -> Any:
        return base.forward(self, *tensors)

    sig = inspect.Signature(params)
    forward.__signature__ = sig  # type: ignore[attr-defined]  # read by inspect.signature
    Named.forward = forward
    Named.__name__ = base.__name__
    return Named


def _module_base() -> type[Any]:
    """torch.nn.Module, imported when first needed (the local classes below derive from it)."""
    import torch

    return torch.nn.Module


def _accepts(model: Any) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _tensor_fields(output: Any) -> list[str]:
    import torch

    items = output.items() if hasattr(output, "items") else []
    return [k for k, v in items if isinstance(v, torch.Tensor) and k not in _SKIPPED_OUTPUTS]


# -- one graph ---------------------------------------------------------------------------------

def _task_module(model: Any, input_names: list[str], output_names: list[str]) -> Any:
    base: type[Any] = _module_base()

    class TaskOutputs(base):
        """The model called by keyword, returning its chosen output fields as a tuple."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> Any:
            out = self.model(**dict(zip(input_names, tensors)), return_dict=True)
            return tuple(out[n] for n in output_names)

    return positional_wrapper(TaskOutputs, input_names)()


def given_inputs(fm: FolderModel, specs: list[str], npz: str | None
                 ) -> OrderedDict[str, Any] | None:
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
    accepts = _accepts(fm.model)
    unknown = [n for n in arrays if n not in accepts]
    if unknown:
        raise BadInputError(f"{fm.folder}: {fm.task.class_name}.forward() takes no "
                            f"{', '.join(unknown)} (it takes {', '.join(sorted(accepts))})")
    return OrderedDict((n, torch.from_numpy(np.ascontiguousarray(a))) for n, a in arrays.items())


def single_graph(fm: FolderModel, given: OrderedDict[str, Any] | None = None,
                 static: bool = False, sizes_opset: int = 0,
                 sizes_precision: str = "fp32") -> GraphSpec:
    """A one-graph task: the model's inputs (the user's `given` ones, else made from its
    config), its tensor output fields; dynamic in batch and sequence (optimum's dim names)
    unless `static` or the user gave the inputs; image and audio sizes too where the model
    takes them and the export's opset (`sizes_opset`) is the dynamo exporter's (hf/sizes.py)."""
    import torch

    model, config = fm.model, fm.config
    if hasattr(config, "use_cache"):
        config.use_cache = False
    if given is None:
        requests = hi.main_requests(model, config, fm.preprocessor, _accepts(model),
                                    fm.task.name)
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
    names = _tensor_fields(out)
    module = _task_module(model, list(inputs), names)
    dims: list[GraphDim] = []
    if not static and given is None:
        sizes = size_dims(model, lambda m: _task_module(m, list(inputs), names), inputs,
                          (BATCH_RANGE[0], BATCH_RANGE[2]), sizes_opset, sizes_precision)
        fm.notes.extend(Note(f"{s.input_name} keeps its example size: {s.why_static}",
                             "static-size") for s in sizes if s.why_static)
        dims = one_graph_dims(inputs, config, fm.task.name, sizes)
    return GraphSpec("model.onnx", module, inputs, names, dims)


#: Inputs whose last axis is the token sequence (optimum: `sequence_length`).
_TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "position_ids")


def one_graph_dims(inputs: OrderedDict[str, Any], config: Any, task: str,
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

def _kv_shape(model: Any, batch: int, past: int) -> tuple[int, int, int, int]:
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


def _decoder_module(model: Any, input_names: list[str], layers: int) -> Any:
    base: type[Any] = _module_base()
    cache_kw = cache_parameter(model)
    first_past = next(i for i, n in enumerate(input_names) if n.startswith("past_key_values"))

    class DecoderWithPast(base):
        """The decoder called with a DynamicCache built from the past tensors; its logits and
        the updated cache's tensors out."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> Any:
            named = dict(zip(input_names[:first_past], tensors[:first_past]))
            past = tensors[first_past:]
            pairs = [(past[2 * i], past[2 * i + 1]) for i in range(layers)]
            out = self.model(**named, **{cache_kw: dynamic_cache(pairs)}, use_cache=True,
                             return_dict=True)
            present, _cross = split_cache(returned_cache(out))
            return (out.logits, *(t for pair in present for t in pair))

    return positional_wrapper(DecoderWithPast, input_names)()


def decoder_graph(fm: FolderModel) -> GraphSpec:
    """`text-generation-with-past`: one graph for every step of the generation loop (the
    prompt with an empty past, then a token at a time)."""
    import torch

    model, config = fm.model, fm.config
    accepts = _accepts(model)
    seq = hi.sequence_length(config, 4)
    limit = hi.sequence_length(config, 10_000) + 2
    shape = _kv_shape(model, hi.BATCH, PAST)
    layers = len(split_cache(returned_cache(_one_step(model)))[0])
    ids = hi.make([hi.Request("input_ids", (hi.BATCH, seq), hi.INT64)], config)["input_ids"]
    inputs: OrderedDict[str, Any] = OrderedDict(input_ids=ids)
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


def _one_step(model: Any) -> Any:
    import torch

    with torch.no_grad():
        return model(input_ids=torch.zeros((1, 1), dtype=torch.long), use_cache=True,
                     return_dict=True)


# -- an encoder–decoder ------------------------------------------------------------------------

def _encoder_module(model: Any, input_names: list[str]) -> Any:
    base: type[Any] = _module_base()

    class Encoder(base):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = model.get_encoder()

        def forward(self, *tensors: Any) -> Any:
            out = self.encoder(**dict(zip(input_names, tensors)), return_dict=True)
            return (out.last_hidden_state,)

    return positional_wrapper(Encoder, input_names)()


def _seq2seq_decoder_module(model: Any, input_names: list[str], layers: int,
                            with_past: bool) -> Any:
    from transformers.modeling_outputs import BaseModelOutput

    base: type[Any] = _module_base()
    cache_kw = cache_parameter(model)
    n_fixed = sum(1 for n in input_names if not n.startswith("past_key_values"))

    class Decoder(base):
        """One decoder step from the encoder's output: the model called with
        decoder_input_ids, encoder_outputs and an EncoderDecoderCache (empty on the first
        step); the logits and the cache's tensors out."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> Any:
            named = dict(zip(input_names[:n_fixed], tensors[:n_fixed]))
            past = tensors[n_fixed:]
            self_pairs = [(past[4 * i], past[4 * i + 1]) for i in range(layers)] if past else []
            cross = [(past[4 * i + 2], past[4 * i + 3]) for i in range(layers)] if past else []
            kwargs = {"decoder_input_ids": named["input_ids"],
                      "encoder_outputs": BaseModelOutput(
                          last_hidden_state=named["encoder_hidden_states"]),
                      cache_kw: encoder_decoder_cache(self_pairs, cross)}
            if "encoder_attention_mask" in named:
                kwargs["attention_mask"] = named["encoder_attention_mask"]
            out = self.model(**kwargs, use_cache=True, return_dict=True)
            own, cross_out = split_cache(returned_cache(out))
            flat = [t for pair in own for t in pair]
            if not with_past:
                flat = [t for a, b in zip(own, cross_out) for t in (*a, *b)]
            return (out.logits, *flat)

    return positional_wrapper(Decoder, input_names)()


def _encoder_inputs(fm: FolderModel) -> OrderedDict[str, Any]:
    encoder = fm.model.get_encoder()
    accepts = _accepts(encoder)
    requests = hi.main_requests(fm.model, fm.config, fm.preprocessor, accepts, fm.task.name)
    return hi.make(requests, fm.config)


def seq2seq_graphs(fm: FolderModel) -> list[GraphSpec]:
    """The encoder, the first decoder step and (with past) the decoder with past."""
    import torch

    model, config = fm.model, fm.config
    enc_inputs = _encoder_inputs(fm)
    with torch.no_grad():
        hidden = model.get_encoder()(**enc_inputs, return_dict=True).last_hidden_state
    text = "input_ids" in enc_inputs
    enc_len = int(hidden.shape[1])
    start = int(getattr(config, "decoder_start_token_id", None) or 0)
    seq = 3
    dec_ids = hi.make([hi.Request("input_ids", (hi.BATCH, seq), hi.INT64)], config)["input_ids"]
    dec_ids[:, 0] = start
    first: OrderedDict[str, Any] = OrderedDict(input_ids=dec_ids)
    if text:
        first["encoder_attention_mask"] = enc_inputs.get(
            "attention_mask", torch.ones(hidden.shape[:2], dtype=torch.long))
    first["encoder_hidden_states"] = hidden
    with torch.no_grad():
        dec = model(decoder_input_ids=dec_ids, encoder_outputs=(hidden,),
                    attention_mask=first.get("encoder_attention_mask"), use_cache=True,
                    return_dict=True)
    own, cross = split_cache(returned_cache(dec))
    layers = len(own)
    enc_names = list(enc_inputs)
    first_names = ["logits"] + [f"present.{i}.{a}.{k}" for i in range(layers)
                                for a in ("decoder", "encoder") for k in ("key", "value")]
    seq_axes = [(n, 1) for n in enc_names if text]
    enc_dims = [GraphDim("batch", *BATCH_RANGE, axes=tuple((n, 0) for n in enc_names))]
    if text:
        enc_dims.append(GraphDim("encoder_sequence_length", 2, enc_len, 4 * enc_len,
                                 axes=tuple(seq_axes)))
    graphs = [GraphSpec(ENCODER_FILE, _encoder_module(model, enc_names), enc_inputs,
                        ["last_hidden_state"], enc_dims, role="encoder")]
    dec_enc_axes = (tuple((n, 1) for n in first if n != "input_ids") if text else ())
    dec_dims = [GraphDim("batch", *BATCH_RANGE, axes=tuple((n, 0) for n in first)),
                GraphDim("decoder_sequence_length", 1, seq, 16, axes=(("input_ids", 1),))]
    if text:
        dec_dims.append(GraphDim("encoder_sequence_length", 2, enc_len, 4 * enc_len,
                                 axes=dec_enc_axes))
    graphs.append(GraphSpec(DECODER_FILE,
                            _seq2seq_decoder_module(model, list(first), layers, False), first,
                            first_names, dec_dims, role="decoder"))
    if not fm.task.with_past:
        return graphs
    past_inputs: OrderedDict[str, Any] = OrderedDict(input_ids=dec_ids[:, :1].clone())
    for name in first:
        if name != "input_ids":
            past_inputs[name] = first[name]
    for i in range(layers):
        past_inputs[f"past_key_values.{i}.decoder.key"] = own[i][0]
        past_inputs[f"past_key_values.{i}.decoder.value"] = own[i][1]
        past_inputs[f"past_key_values.{i}.encoder.key"] = cross[i][0]
        past_inputs[f"past_key_values.{i}.encoder.value"] = cross[i][1]
    past_names = ["logits"] + [f"present.{i}.decoder.{k}" for i in range(layers)
                               for k in ("key", "value")]
    # one new token a step: input_ids is [batch, 1], as optimum and ONNX Runtime GenAI have it
    pdims = [GraphDim("batch", *BATCH_RANGE, axes=tuple((n, 0) for n in past_inputs)),
             GraphDim("past_decoder_sequence_length", 1, seq, 32,
                      axes=tuple((n, 2) for n in past_inputs if ".decoder." in n))]
    if text:
        axes = [(n, 1) for n in past_inputs if n.startswith("encoder_")]
        axes += [(n, 2) for n in past_inputs if ".encoder." in n]
        pdims.append(GraphDim("encoder_sequence_length", 2, enc_len, 4 * enc_len,
                              axes=tuple(axes)))
    graphs.append(GraphSpec(DECODER_WITH_PAST_FILE,
                            _seq2seq_decoder_module(model, list(past_inputs), layers, True),
                            past_inputs, past_names, pdims, role="decoder_with_past"))
    return graphs


def graphs_for(fm: FolderModel, given: OrderedDict[str, Any] | None = None,
               static: bool = False, sizes_opset: int = 0,
               sizes_precision: str = "fp32") -> list[GraphSpec]:
    """Every graph the folder's task exports (a one-graph task on the user's `given`
    inputs, when there are any; static in every dim with `static`)."""
    kind = fm.task.kind
    if kind == DECODER and fm.task.with_past:
        return [decoder_graph(fm)]
    if kind == SEQ2SEQ:
        return seq2seq_graphs(fm)
    if kind == DECODER:
        fm.config.use_cache = False
    return [single_graph(fm, given, static, sizes_opset, sizes_precision)]
