"""The fifth zoo (issue 44): 24 architectures users save that export-gelu had not seen, tiny,
built from their configs with random weights (no hub access), each saved three ways: a
`save_pretrained` folder, a `.pt2` (torch.export.save) and in memory (the API).

`MODELS[name]` is (builder, example inputs): the builder makes the model (seeded, eval mode),
the inputs are what a user would call it with (keyword tensors, the same for `.pt2` and the
API). The issue's four timm models (Hiera, PVTv2, EdgeNeXt, MViTv2) need timm, which needs
torchvision; where that does not import, `timm_models()` says why and the transformers ports
of Hiera and PVTv2 (`hiera`, `pvt_v2`) stand in for two of them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

SEED = 0
VOCAB = 100
TEXT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64)
VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def _t() -> Any:
    import transformers

    return transformers


def _ids(batch: int = 2, seq: int = 16, vocab: int = VOCAB) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {"input_ids": torch.randint(3, vocab, (batch, seq), generator=g),
            "attention_mask": torch.ones(batch, seq, dtype=torch.long)}


def _pixels(*shape: int) -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(*shape, generator=torch.Generator().manual_seed(1))}


def _resnet_backbone() -> dict[str, Any]:
    return dict(model_type="resnet", embedding_size=8, hidden_sizes=[8, 16, 16, 16],
                depths=[1, 1, 1, 1], layer_type="basic", out_features=["stage2", "stage3",
                                                                       "stage4"])


# -- vision ------------------------------------------------------------------------------------

def yolos() -> Any:
    t = _t()
    return t.YolosForObjectDetection(t.YolosConfig(**VIT, image_size=[32, 32], patch_size=8,
                                                   num_detection_tokens=4))


def conditional_detr() -> Any:
    t = _t()
    return t.ConditionalDetrForObjectDetection(t.ConditionalDetrConfig(
        backbone_config=_resnet_backbone(), use_timm_backbone=False,
        use_pretrained_backbone=False, d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, num_queries=8, activation_function="gelu"))


def rt_detr() -> Any:
    t = _t()
    backbone = t.RTDetrResNetConfig(embedding_size=16, hidden_sizes=[16, 16, 16, 16],
                                    depths=[1, 1, 1, 1], layer_type="basic",
                                    out_features=["stage2", "stage3", "stage4"])
    return t.RTDetrForObjectDetection(t.RTDetrConfig(
        backbone_config=backbone, encoder_in_channels=[16, 16, 16], encoder_hidden_dim=32,
        encoder_ffn_dim=64, d_model=32, decoder_in_channels=[32, 32, 32], decoder_ffn_dim=64,
        decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4, num_queries=8,
        num_denoising=0, anchor_image_size=[64, 64], eval_size=None,
        encoder_activation_function="gelu"))


def dpt() -> Any:
    t = _t()
    return t.DPTForDepthEstimation(t.DPTConfig(
        **VIT | {"num_hidden_layers": 4}, image_size=32, patch_size=8,
        backbone_out_indices=[0, 1, 2, 3],
        neck_hidden_sizes=[8, 8, 16, 16], fusion_hidden_size=16, reassemble_factors=[4, 2, 1,
                                                                                  0.5]))


def hiera() -> Any:
    t = _t()
    return t.HieraModel(t.HieraConfig(embed_dim=8, image_size=[64, 64], patch_size=[7, 7],
                                      patch_stride=[4, 4], patch_padding=[3, 3],
                                      depths=[1, 1, 1, 1], num_heads=[1, 1, 1, 1],
                                      masked_unit_size=[8, 8], query_stride=[2, 2],
                                      num_query_pool=2))


def pvt_v2() -> Any:
    t = _t()
    return t.PvtV2Model(t.PvtV2Config(image_size=32, hidden_sizes=[8, 16, 16, 16],
                                      depths=[1, 1, 1, 1], num_attention_heads=[1, 1, 2, 2],
                                      sr_ratios=[4, 2, 1, 1], mlp_ratios=[2, 2, 2, 2]))


def timesformer() -> Any:
    t = _t()
    return t.TimesformerModel(t.TimesformerConfig(**VIT, image_size=32, patch_size=8,
                                                  num_frames=4))


# -- audio -------------------------------------------------------------------------------------

def ast() -> Any:
    t = _t()
    return t.ASTForAudioClassification(t.ASTConfig(**VIT, patch_size=8, frequency_stride=8,
                                                   time_stride=8, max_length=64,
                                                   num_mel_bins=32, num_labels=4))


def wavlm() -> Any:
    t = _t()
    return t.WavLMModel(t.WavLMConfig(
        **VIT, conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 8),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, num_buckets=32,
        max_bucket_distance=64, feat_extract_norm="group", do_stable_layer_norm=False))


def clap_audio() -> Any:
    t = _t()
    return t.ClapAudioModel(t.ClapAudioConfig(
        window_size=4, num_mel_bins=16, spec_size=32, patch_size=4, patch_stride=[4, 4],
        hidden_size=32, patch_embeds_hidden_size=16, depths=[1, 1], num_attention_heads=[2, 2],
        enable_fusion=False, projection_dim=16))


def patchtst() -> Any:
    t = _t()
    return t.PatchTSTForPrediction(t.PatchTSTConfig(
        num_input_channels=3, context_length=32, patch_length=8, patch_stride=8,
        prediction_length=8, d_model=16, num_attention_heads=2, num_hidden_layers=2,
        ffn_dim=32, activation_function="gelu"))


# -- text encoders -----------------------------------------------------------------------------

def esm() -> Any:
    t = _t()
    return t.EsmModel(t.EsmConfig(**TEXT, pad_token_id=1, mask_token_id=2,
                                  position_embedding_type="rotary"))


def funnel() -> Any:
    t = _t()
    return t.FunnelModel(t.FunnelConfig(vocab_size=VOCAB, block_sizes=[1, 1], d_model=32,
                                        n_head=4, d_head=8, d_inner=64))


def longformer() -> Any:
    t = _t()
    return t.LongformerModel(t.LongformerConfig(**TEXT | {"max_position_embeddings": 130},
                                                attention_window=8, pad_token_id=1))


def deberta_v2() -> Any:
    t = _t()
    return t.DebertaV2Model(t.DebertaV2Config(**TEXT, relative_attention=True,
                                              position_buckets=8,
                                              pos_att_type=["p2c", "c2p"]))


# -- decoders ----------------------------------------------------------------------------------

def gemma3() -> Any:
    t = _t()
    return t.Gemma3ForCausalLM(t.Gemma3TextConfig(
        **TEXT, num_key_value_heads=2, head_dim=8, sliding_window=8, initializer_range=0.5,
        layer_types=["sliding_attention", "full_attention"]))


def qwen3() -> Any:
    t = _t()
    return t.Qwen3ForCausalLM(t.Qwen3Config(**TEXT, num_key_value_heads=2, head_dim=8,
                                            initializer_range=0.5))


def phi3() -> Any:
    t = _t()
    return t.Phi3ForCausalLM(t.Phi3Config(**TEXT, num_key_value_heads=2, initializer_range=0.5,
                                          pad_token_id=0, bos_token_id=1, eos_token_id=2))


def mamba() -> Any:
    t = _t()
    return t.MambaForCausalLM(t.MambaConfig(vocab_size=VOCAB, hidden_size=32, state_size=4,
                                            num_hidden_layers=2, expand=2, conv_kernel=4,
                                            hidden_act="gelu"))


# -- encoder-decoders --------------------------------------------------------------------------

def moonshine() -> Any:
    t = _t()
    return t.MoonshineForConditionalGeneration(t.MoonshineConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=2,
        decoder_num_hidden_layers=2, encoder_num_attention_heads=4,
        decoder_num_attention_heads=4, max_position_embeddings=64, initializer_range=0.5,
        decoder_start_token_id=1, pad_token_id=0, bos_token_id=1, eos_token_id=2))


def pegasus() -> Any:
    t = _t()
    return t.PegasusForConditionalGeneration(t.PegasusConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, init_std=0.5, pad_token_id=0,
        eos_token_id=1, decoder_start_token_id=0, activation_function="gelu",
        forced_eos_token_id=None))


def trocr() -> Any:
    """A TrOCR-style VisionEncoderDecoder: a 32-px ViT encoder, a TrOCR decoder."""
    t = _t()
    encoder = t.ViTConfig(**VIT, image_size=32, patch_size=8)
    decoder = t.TrOCRConfig(vocab_size=VOCAB, d_model=32, decoder_layers=2,
                            decoder_attention_heads=4, decoder_ffn_dim=64,
                            max_position_embeddings=64, activation_function="gelu",
                            init_std=0.5, decoder_start_token_id=2, pad_token_id=1,
                            bos_token_id=0, eos_token_id=2)
    config = t.VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id = 2, 1
    return t.VisionEncoderDecoderModel(config=config)


#: name → (builder, example inputs as a user calls the model: keyword tensors)
MODELS: dict[str, tuple[Callable[[], Any], Callable[[], dict[str, torch.Tensor]]]] = {
    "yolos": (yolos, lambda: _pixels(2, 3, 32, 32)),
    "conditional_detr": (conditional_detr, lambda: _pixels(2, 3, 64, 64)),
    "rt_detr": (rt_detr, lambda: _pixels(2, 3, 64, 64)),
    "dpt": (dpt, lambda: _pixels(2, 3, 32, 32)),
    "hiera": (hiera, lambda: _pixels(2, 3, 64, 64)),
    "pvt_v2": (pvt_v2, lambda: _pixels(2, 3, 32, 32)),
    "timesformer": (timesformer, lambda: _pixels(2, 4, 3, 32, 32)),
    "ast": (ast, lambda: {"input_values": torch.randn(2, 64, 32)}),
    "wavlm": (wavlm, lambda: {"input_values": torch.randn(2, 4000)}),
    "clap_audio": (clap_audio, lambda: {"input_features": torch.randn(2, 1, 32, 16)}),
    "patchtst": (patchtst, lambda: {"past_values": torch.randn(2, 32, 3)}),
    "esm": (esm, _ids),
    "funnel": (funnel, _ids),
    "longformer": (longformer, _ids),
    "deberta_v2": (deberta_v2, _ids),
    "gemma3": (gemma3, _ids),
    "qwen3": (qwen3, _ids),
    "phi3": (phi3, _ids),
    "mamba": (mamba, lambda: {"input_ids": _ids()["input_ids"]}),
    "moonshine": (moonshine, lambda: {"input_values": torch.randn(2, 2000),
                                      "decoder_input_ids": _ids(seq=4)["input_ids"]}),
    "pegasus": (pegasus, lambda: {**_ids(), "decoder_input_ids": _ids(seq=4)["input_ids"]}),
    "trocr": (trocr, lambda: {**_pixels(2, 3, 32, 32),
                              "decoder_input_ids": _ids(seq=4)["input_ids"]}),
}


def build(name: str) -> Any:
    """The model `name`, seeded and in eval mode."""
    torch.manual_seed(SEED)
    if name in DIFFUSERS:
        return DIFFUSERS[name][0]().eval()
    return MODELS[name][0]().eval()


def example_inputs(name: str) -> dict[str, torch.Tensor]:
    table = DIFFUSERS if name in DIFFUSERS else MODELS
    return table[name][1]()


# -- diffusers ---------------------------------------------------------------------------------

def sd_unet() -> Any:
    """An SD-style UNet2DConditionModel: cross-attention transformer blocks with GEGLU."""
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(16, 32), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
        attention_head_dim=4, norm_num_groups=8)


def sd3_transformer() -> Any:
    from diffusers import SD3Transformer2DModel

    return SD3Transformer2DModel(sample_size=16, patch_size=2, in_channels=4, num_layers=2,
                                 attention_head_dim=8, num_attention_heads=2,
                                 joint_attention_dim=16, caption_projection_dim=16,
                                 pooled_projection_dim=8, out_channels=4, pos_embed_max_size=16)


def _unet_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {"sample": torch.randn(2, 4, 16, 16, generator=g),
            "timestep": torch.tensor([10.0, 500.0]),
            "encoder_hidden_states": torch.randn(2, 8, 16, generator=g)}


def _sd3_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {"hidden_states": torch.randn(2, 4, 16, 16, generator=g),
            "encoder_hidden_states": torch.randn(2, 8, 16, generator=g),
            "pooled_projections": torch.randn(2, 8, generator=g),
            "timestep": torch.tensor([10.0, 500.0])}


DIFFUSERS: dict[str, tuple[Callable[[], Any], Callable[[], dict[str, torch.Tensor]]]] = {
    "sd_unet": (sd_unet, _unet_inputs),
    "sd3_transformer": (sd3_transformer, _sd3_inputs),
}

#: The issue's timm models (timm.create_model names, tiny overrides).
TIMM = {"timm_hiera": "hiera_tiny_224", "timm_pvt_v2": "pvt_v2_b0",
        "timm_edgenext": "edgenext_xx_small", "timm_mvitv2": "mvitv2_tiny"}


def timm_missing() -> str:
    """Why timm models cannot be built here ("" when they can)."""
    try:
        import timm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ImportError, or torchvision's RuntimeError
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:160]
        return (f"timm does not import here ({type(exc).__name__}: {text}); timm needs "
                "torchvision, whose PyPI wheels link the CUDA build of torch")
    return ""


# -- saving ------------------------------------------------------------------------------------

def save_folder(name: str, folder: Path) -> Path:
    """`name` saved with save_pretrained (safetensors) into `folder`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build(name).save_pretrained(str(folder))
    return folder


def save_pt2(name: str, path: Path) -> Path:
    """`name` captured by torch.export on its example inputs (keywords) and saved."""
    import inspect

    model = build(name)
    kwargs = example_inputs(name)
    if "use_cache" in inspect.signature(model.forward).parameters:
        kwargs = {**kwargs, "use_cache": False}  # a sub-config's too (VisionEncoderDecoder)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.export.save(torch.export.export(model, (), kwargs, strict=False), str(path))
    return path


ALL = (*MODELS, *DIFFUSERS)
