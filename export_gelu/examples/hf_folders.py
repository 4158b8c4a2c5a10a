"""Tiny Hugging Face save_pretrained folders built from configs (random weights, no hub access):
what tests/exporter/test_hf_folders.py and benchmarks/hf_vs_optimum.py export.

Sizes: hidden 32, two layers, vocabulary 100, so a folder exports in seconds on two CPU cores.
Generation models get a wide weight init so greedy decoding picks varied tokens (with the
default 0.02 a random model repeats one token, which would not test the loop).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

VOCAB = 100
SEED = 0
TEXT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64)


def _bert(cls: str) -> PreTrainedModel:
    import transformers as t

    return getattr(t, cls)(t.BertConfig(**TEXT))


def _roberta() -> PreTrainedModel:
    import transformers as t

    return t.RobertaForMaskedLM(t.RobertaConfig(**TEXT, pad_token_id=1))


def _distilbert() -> PreTrainedModel:
    import transformers as t

    return t.DistilBertForQuestionAnswering(t.DistilBertConfig(
        vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
        max_position_embeddings=64))


def _gpt2() -> PreTrainedModel:
    import transformers as t

    return t.GPT2LMHeadModel(t.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                          n_positions=64, bos_token_id=0, eos_token_id=0,
                                          initializer_range=0.5))


def _phi() -> PreTrainedModel:
    import transformers as t

    return t.PhiForCausalLM(t.PhiConfig(**TEXT, initializer_range=0.5, pad_token_id=0,
                                        bos_token_id=0, eos_token_id=0))


def _falcon() -> PreTrainedModel:
    import transformers as t

    return t.FalconForCausalLM(t.FalconConfig(vocab_size=VOCAB, hidden_size=32,
                                              num_hidden_layers=2, num_attention_heads=4,
                                              max_position_embeddings=64, initializer_range=0.5,
                                              bos_token_id=0, eos_token_id=0))


def _t5() -> PreTrainedModel:
    import transformers as t

    return t.T5ForConditionalGeneration(t.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=4, feed_forward_proj="gated-gelu", decoder_start_token_id=0, pad_token_id=0,
        eos_token_id=1, initializer_factor=8.0))


def _bart() -> PreTrainedModel:
    import transformers as t

    return t.BartForConditionalGeneration(t.BartConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, init_std=0.5, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None))


def _vit() -> PreTrainedModel:
    import transformers as t

    return t.ViTForImageClassification(t.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        image_size=32, patch_size=8, num_channels=3, num_labels=5))


def _clip() -> PreTrainedModel:
    import transformers as t

    text = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64, max_position_embeddings=64, projection_dim=16)
    vision = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, image_size=32, patch_size=8, projection_dim=16)
    return t.CLIPModel(t.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))


def _whisper() -> PreTrainedModel:
    import transformers as t

    return t.WhisperForConditionalGeneration(t.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=8, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_source_positions=16, max_target_positions=32, init_std=0.5,
        pad_token_id=0, bos_token_id=0, eos_token_id=1, decoder_start_token_id=0,
        suppress_tokens=None, begin_suppress_tokens=None))


def _wav2vec2() -> PreTrainedModel:
    import transformers as t

    return t.Wav2Vec2ForCTC(t.Wav2Vec2Config(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 8),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, do_stable_layer_norm=False,
        feat_extract_norm="group"))


#: name → (builder, the task config.json's architectures give it)
MODELS: dict[str, tuple[Callable[[], PreTrainedModel], str]] = {
    "bert": (lambda: _bert("BertModel"), "feature-extraction"),
    "bert-cls": (lambda: _bert("BertForSequenceClassification"), "text-classification"),
    "roberta": (_roberta, "fill-mask"),
    "distilbert": (_distilbert, "question-answering"),
    "gpt2": (_gpt2, "text-generation-with-past"),
    "phi": (_phi, "text-generation-with-past"),
    "falcon": (_falcon, "text-generation-with-past"),
    "t5": (_t5, "text2text-generation-with-past"),
    "bart": (_bart, "text2text-generation-with-past"),
    "vit": (_vit, "image-classification"),
    "clip": (_clip, "zero-shot-image-classification"),
    "whisper": (_whisper, "automatic-speech-recognition-with-past"),
    "wav2vec2": (_wav2vec2, "automatic-speech-recognition"),
}


def _more() -> dict[str, Callable[[], PreTrainedModel]]:
    """Architectures beyond the issue's list (rotary, ALiBi, relative attention, GQA, windowed
    vision, two towers with sigmoid loss, tied encoder-decoders): what an unseen folder may be."""
    import transformers as t

    text = dict(TEXT)
    seq2seq = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                   encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                   decoder_ffn_dim=64, max_position_embeddings=64, init_std=0.5)
    return {
        "deberta": lambda: t.DebertaV2ForSequenceClassification(t.DebertaV2Config(
            **text, relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"])),
        "swin": lambda: t.SwinModel(t.SwinConfig(image_size=32, patch_size=4, embed_dim=16,
                                                 depths=[1, 1], num_heads=[2, 2],
                                                 window_size=4)),
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**text, num_key_value_heads=2,
                                                          initializer_range=0.5)),
        "bloom": lambda: t.BloomForCausalLM(t.BloomConfig(vocab_size=VOCAB, hidden_size=32,
                                                          n_layer=2, n_head=4,
                                                          initializer_range=0.5)),
        "gemma": lambda: t.GemmaForCausalLM(t.GemmaConfig(**text, num_key_value_heads=2,
                                                          head_dim=8, initializer_range=0.5)),
        "marian": lambda: t.MarianMTModel(t.MarianConfig(
            **seq2seq, activation_function="gelu", decoder_start_token_id=0, pad_token_id=0)),
        "siglip": lambda: t.SiglipModel(t.SiglipConfig(
            text_config=dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, intermediate_size=64,
                             max_position_embeddings=64),
            vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=64, image_size=32, patch_size=8))),
    }


def build(name: str) -> PreTrainedModel:
    torch.manual_seed(SEED)
    return (MODELS[name][0] if name in MODELS else _more()[name])().eval()


#: More architectures (tests run them on a slow path), by name.
MORE_MODELS = ("deberta", "swin", "llama", "bloom", "gemma", "marian", "siglip")


def save_folder(name: str, folder: Path, **save: object) -> Path:
    """The model `name` saved with save_pretrained into `folder` (created)."""
    build(name).save_pretrained(str(folder), **save)
    return folder
