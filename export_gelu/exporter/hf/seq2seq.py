"""An encoder–decoder's graphs, named as optimum names them: `encoder_model.onnx`
(→ `last_hidden_state`), `decoder_model.onnx` (first step: `input_ids`,
`encoder_attention_mask`, `encoder_hidden_states` → `logits`, `present.N.decoder.key/value`,
`present.N.encoder.key/value`) and, with past, `decoder_with_past_model.onnx` (also
`past_key_values.N.decoder.key/value` and `.encoder.key/value` in; `logits`,
`present.N.decoder.key/value` out).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from export_gelu.errors import BadInputError
from export_gelu.exporter.hf import inputs as hi
from export_gelu.exporter.hf.cache import (
    cache_parameter,
    encoder_decoder_cache,
    returned_cache,
    split_cache,
)
from export_gelu.exporter.hf.folder import FolderModel
from export_gelu.exporter.hf.graph_spec import (
    BATCH_RANGE,
    GraphDim,
    GraphSpec,
    forward_params,
    positional_module,
)
from export_gelu.exporter.hf.tasks import DECODER_FILE, DECODER_WITH_PAST_FILE, ENCODER_FILE

if TYPE_CHECKING:
    import torch

    from export_gelu.exporter.torch_values import TensorFeed


def encoder_of(model: torch.nn.Module) -> torch.nn.Module:
    """An encoder–decoder's encoder (transformers' `get_encoder()`)."""
    import torch

    get_encoder = getattr(model, "get_encoder", None)
    encoder = get_encoder() if callable(get_encoder) else None
    if not isinstance(encoder, torch.nn.Module):
        raise BadInputError(f"{type(model).__name__} has no encoder module (get_encoder())")
    return encoder


def _encoder_module(model: torch.nn.Module, input_names: list[str]) -> torch.nn.Module:
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder_of(model)

        def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor]:
            out = self.encoder(**dict(zip(input_names, tensors)), return_dict=True)
            return (out.last_hidden_state,)

    return positional_module(Encoder, input_names)


def _seq2seq_decoder_module(model: torch.nn.Module, input_names: list[str], layers: int,
                            with_past: bool, encoder_output: type) -> torch.nn.Module:
    """`encoder_output`: the type the model's encoder returns (BaseModelOutput, or one with
    more fields the model reads, left None here: Moonshine's `attention_mask`)."""
    import torch

    cache_kw = cache_parameter(model)
    n_fixed = sum(1 for n in input_names if not n.startswith("past_key_values"))

    class Decoder(torch.nn.Module):
        """One decoder step from the encoder's output: the model called with
        decoder_input_ids, encoder_outputs and an EncoderDecoderCache (empty on the first
        step); the logits and the cache's tensors out."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
            named = dict(zip(input_names[:n_fixed], tensors[:n_fixed]))
            past = tensors[n_fixed:]
            self_pairs = [(past[4 * i], past[4 * i + 1]) for i in range(layers)] if past else []
            cross = [(past[4 * i + 2], past[4 * i + 3]) for i in range(layers)] if past else []
            kwargs = {"decoder_input_ids": named["input_ids"],
                      "encoder_outputs": encoder_output(
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

    return positional_module(Decoder, input_names)


def _encoder_inputs(fm: FolderModel) -> TensorFeed:
    encoder = encoder_of(fm.model)
    accepts = forward_params(encoder)
    requests = hi.main_requests(fm.model, fm.config, fm.preprocessor, accepts, fm.task.name)
    return hi.make(requests, fm.config)


def seq2seq_graphs(fm: FolderModel) -> list[GraphSpec]:
    """The encoder, the first decoder step and (with past) the decoder with past. The
    encoder's inputs come from its own sub-config (a VisionEncoderDecoder's images from its
    vision encoder's), the decoder's ids from the decoder's vocabulary, its first token from
    `decoder_start_token_id` (hf/inputs.py: start_token)."""
    import torch

    model, config = fm.model, fm.config
    enc_inputs = _encoder_inputs(fm)
    with torch.no_grad():
        encoded = encoder_of(model)(**enc_inputs, return_dict=True)
    hidden, encoded_as = encoded.last_hidden_state, type(encoded)
    text = "input_ids" in enc_inputs
    enc_len = int(hidden.shape[1])
    start = hi.start_token(config)
    seq = 3
    dec_ids = hi.make([hi.Request("input_ids", (hi.BATCH, seq), hi.INT64)], config)["input_ids"]
    dec_ids[:, 0] = start
    first: TensorFeed = OrderedDict(input_ids=dec_ids)
    if text:
        first["encoder_attention_mask"] = enc_inputs.get(
            "attention_mask", torch.ones(hidden.shape[:2], dtype=torch.long))
    first["encoder_hidden_states"] = hidden
    mask = {"attention_mask": first["encoder_attention_mask"]} if text else {}
    with torch.no_grad():  # the encoder's output as its own type (Moonshine reads its
        dec = model(decoder_input_ids=dec_ids, use_cache=True, return_dict=True,  # fields)
                    encoder_outputs=encoded_as(last_hidden_state=hidden), **mask)
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
    decoder = _seq2seq_decoder_module(model, list(first), layers, False, encoded_as)
    graphs.append(GraphSpec(DECODER_FILE, decoder, first, first_names, dec_dims,
                            role="decoder"))
    if not fm.task.with_past:
        return graphs
    past_inputs: TensorFeed = OrderedDict(input_ids=dec_ids[:, :1].clone())
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
                            _seq2seq_decoder_module(model, list(past_inputs), layers, True,
                                                    encoded_as),
                            past_inputs, past_names, pdims, role="decoder_with_past"))
    return graphs
