"""Example inputs for a Hugging Face model, sized from its config and made by the realistic
input generator (inputs/generated.py): token ids inside the vocabulary, padding masks, token
types 0 then 1, pixels and audio as noise at the size the config gives.

Sizes read from the config (the text, vision or audio sub-config of a two-tower model like
CLIP; the encoder's and the decoder's of a composite one like VisionEncoderDecoder):
`vocab_size`, `max_position_embeddings` (a sequence fits it), `type_vocab_size`,
`image_size` (or LayoutLMv3's `input_size`, RT-DETR's `anchor_image_size`; the image
processor's `crop_size` or `size` first, when the folder has `preprocessor_config.json`),
`num_channels` and a video's `num_frames`, `num_mel_bins` and `max_source_positions`
(Whisper's encoder takes exactly 2 × max_source_positions frames), a spectrogram's
`max_length` × `num_mel_bins` (AST) or `spec_size` × `num_mel_bins` (CLAP's audio tower), a
time series' `context_length` × `num_input_channels` (PatchTST), and for raw audio the
sampling rate from `preprocessor_config.json` (16 kHz when absent) bounded below by the
convolution strides.
The feature extractor's own numbers (`preprocessor_config.json`) win over the config's.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.exporter.inputs.generated import ModelHints, generate_inputs
from export_gelu.exporter.inputs.specs import InputSpec

if TYPE_CHECKING:
    from export_gelu.exporter.torch_values import TensorFeed

BATCH = 2
SEQUENCE = 16
INT64, FLOAT32 = np.dtype(np.int64), np.dtype(np.float32)


#: What marks a sub-config as the text, vision or audio part of a composite model.
_KIND_MARKS = {"text": ("vocab_size",), "vision": ("image_size", "num_channels"),
               "audio": ("num_mel_bins", "conv_stride")}


def sub_config(config: object, which: str) -> object:
    """`text_config` / `vision_config` / `audio_config` of a two-tower model; the `encoder` or
    `decoder` sub-config of a composite model (VisionEncoderDecoder: a vision encoder, a text
    decoder) that is of that kind; else the config itself."""
    own = getattr(config, f"{which}_config", None)
    if own is not None:
        return own
    for side in ("encoder", "decoder"):
        part = getattr(config, side, None)
        if hasattr(part, "to_dict") and any(
                getattr(part, mark, None) is not None for mark in _KIND_MARKS[which]):
            return part
    return config


def start_token(config: object) -> int:
    """The decoder's first token: `decoder_start_token_id` of the config, else of its decoder
    sub-config, else their `bos_token_id`, else 0."""
    decoder = getattr(config, "decoder", None)
    parts = [config] + ([decoder] if hasattr(decoder, "to_dict") else [])
    for key in ("decoder_start_token_id", "bos_token_id"):
        for part in parts:
            value = getattr(part, key, None)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
    return 0


def vocab_size(config: object) -> int | None:
    text = sub_config(config, "text")
    value = getattr(text, "vocab_size", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def sequence_length(config: object, wanted: int = SEQUENCE) -> int:
    """A sequence length the model's position table holds (RoBERTa's starts past padding)."""
    text = sub_config(config, "text")
    limit = getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)
    if isinstance(limit, int) and limit > 0:
        offset = (getattr(text, "pad_token_id", None) or 0) + 2
        return max(1, min(wanted, limit - offset, limit // 2))
    return wanted


def _processor_size(preprocessor: Mapping[str, object]) -> tuple[int, int] | None:
    """(height, width) the image processor hands the model: its `crop_size` when it crops,
    else its `size` (`height`/`width`, `shortest_edge` as a square, or one int); None."""
    crops = preprocessor.get("do_center_crop", True) is not False
    for key in ("crop_size", "size") if crops else ("size",):
        value = preprocessor.get(key)
        if isinstance(value, dict):
            if isinstance(value.get("height"), int) and isinstance(value.get("width"), int):
                return int(value["height"]), int(value["width"])
            value = value.get("shortest_edge")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, value
    return None


def image_shape(config: object, preprocessor: Mapping[str, object] | None = None
                ) -> tuple[int, ...]:
    """(channels, height, width) of the model's images, (frames, channels, height, width) of
    a video model's (`num_frames`: TimeSformer, VideoMAE): the size the folder's image
    processor (preprocessor_config.json) gives, else the config's."""
    vision = sub_config(config, "vision")
    size = (getattr(vision, "image_size", None) or getattr(vision, "input_size", None)
            or getattr(vision, "anchor_image_size", None) or 224)  # RT-DETR: its anchors'
    if isinstance(size, dict):
        size = (size.get("height", 224), size.get("width", 224))
    height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
    height, width = _processor_size(preprocessor or {}) or (height, width)
    image = (int(getattr(vision, "num_channels", 3)), int(height), int(width))
    frames = _positive(getattr(vision, "num_frames", None))
    return (frames, *image) if frames else image


def _positive(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) \
        and value > 0 else None


def _number(preprocessor: Mapping[str, object], config: object, *keys: str) -> int | None:
    """The first of `keys` the feature extractor (preprocessor_config.json) gives, else the
    config; None when neither gives a positive int."""
    for source in (preprocessor, vars(config) if hasattr(config, "__dict__") else {}):
        for key in keys:
            found = _positive(source.get(key))
            if found:
                return found
    return None


def spectrogram_shape(config: object, preprocessor: Mapping[str, object]) -> tuple[int, int] | None:
    """(frames, mel bins) of a model whose `input_values` are a spectrogram (AST: the feature
    extractor's, else the config's `max_length` × `num_mel_bins`); None: raw audio."""
    audio = sub_config(config, "audio")
    frames = _number(preprocessor, audio, "max_length")
    mels = _number(preprocessor, audio, "num_mel_bins")
    return (frames, mels) if frames and mels and not getattr(audio, "conv_stride", None) \
        else None


def series_shape(config: object) -> tuple[int, int]:
    """(context length, channels) of a time-series model's `past_values` (PatchTST)."""
    length = _positive(getattr(config, "context_length", None)) or SEQUENCE * 2
    channels = _positive(getattr(config, "num_input_channels", None)) or 1
    return length, channels


def audio_samples(config: object, preprocessor: Mapping[str, object]) -> int:
    """Raw-audio length: a quarter second at the sampling rate, at least 16 frames' worth of
    the convolution strides."""
    given = preprocessor.get("sampling_rate")  # a number, processor.py checked
    rate = int(given) if isinstance(given, (int, float)) and given else 16000
    strides = getattr(config, "conv_stride", None) or [1]
    return max(rate // 4, math.prod(int(s) for s in strides) * 16)


def feature_shape(config: object, preprocessor: Mapping[str, object]) -> tuple[int, ...]:
    """input_features without the batch: (mel bins, frames) for Whisper-like encoders,
    (1, frames, mel bins) for CLAP's audio tower (`spec_size` frames; 4 channels when it
    fuses), else (frames, feature size)."""
    config = sub_config(config, "audio")
    mels = getattr(config, "num_mel_bins", None)
    positions = getattr(config, "max_source_positions", None)
    if mels and positions:
        return int(mels), 2 * int(positions)
    spec = _positive(getattr(config, "spec_size", None))
    if mels and spec:
        channels = 4 if getattr(config, "enable_fusion", False) else 1
        return channels, spec, _number(preprocessor, config, "feature_size", "num_mel_bins") \
            or int(mels)
    size = _positive(preprocessor.get("feature_size")) \
        or int(getattr(config, "input_feat_per_channel", 80))
    return SEQUENCE * 4, size


#: One input to make: the `--input` record (name, shape, dtype, an explicit range or None:
#: by role).
Request = InputSpec


def hints(config: object, names: list[str]) -> ModelHints:
    """What the config says about the inputs' values: the vocabulary and token types."""
    vocab = vocab_size(config)
    types = getattr(sub_config(config, "text"), "type_vocab_size", None)
    ids = {n: vocab for n in names if vocab and n.endswith("input_ids")}
    return ModelHints(vocab=ids, input_vocab=vocab, type_vocab=types)


def make(requests: list[Request], config: object, seed: int = 0) -> TensorFeed:
    """The inputs as torch tensors, in request order."""
    import torch

    feed = generate_inputs(list(requests), hints(config, [r.name for r in requests]), seed)
    return OrderedDict((n, torch.from_numpy(np.ascontiguousarray(a))) for n, a in feed.items())


def text_requests(config: object, accepts: set[str], shape: tuple[int, ...]) -> list[Request]:
    """input_ids, and attention_mask / token_type_ids where forward() takes them."""
    out = [Request("input_ids", shape, INT64)]
    if "attention_mask" in accepts:
        out.append(Request("attention_mask", shape, INT64))
    types = getattr(sub_config(config, "text"), "type_vocab_size", 0) or 0
    if "token_type_ids" in accepts and types > 1:
        out.append(Request("token_type_ids", shape, INT64))
    return out


def main_requests(model: object, config: object, preprocessor: Mapping[str, object],
                  accepts: set[str], task: str) -> list[Request]:
    """The inputs of a one-graph task, by the model's main input (and both towers for a
    two-tower model that takes input_ids and pixel_values)."""
    main = getattr(model, "main_input_name", "input_ids")
    seq = sequence_length(config)
    out: list[Request] = []
    if main == "input_ids" or ("input_ids" in accepts and "pixel_values" in accepts):
        shape = (BATCH, 2, seq) if task == "multiple-choice" else (BATCH, seq)
        out += text_requests(config, accepts, shape)
    if main == "pixel_values" or "pixel_values" in accepts and out:
        out.append(Request("pixel_values", (BATCH, *image_shape(config, preprocessor)),
                           FLOAT32))
    elif main == "input_values":
        spectrogram = spectrogram_shape(config, preprocessor)
        out.append(Request("input_values", (BATCH, *(spectrogram or (
            audio_samples(sub_config(config, "audio"), preprocessor),))), FLOAT32))
    elif main == "past_values":
        out.append(Request("past_values", (BATCH, *series_shape(config)), FLOAT32))
    elif main == "input_features":
        out.append(Request("input_features", (BATCH, *feature_shape(config, preprocessor)),
                           FLOAT32))
    if not out:
        out += text_requests(config, accepts, (BATCH, seq))
    return out
