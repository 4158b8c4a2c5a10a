"""Real architectures as users save them: the library's own output objects, keyword inputs,
float32 masks, float64 weights. Random weights from transformers configs (no hub access),
tiny sizes (hidden 16-32, one layer) so the tests run on two CPU cores.

Each builder is also a `--model-factory`; `KEYWORD_INPUTS` holds the `--input` specs that
name each model's forward() parameters.
"""

from __future__ import annotations

import torch
from torch import nn

SEED = 0
VOCAB = 100


def t5() -> nn.Module:
    """T5 v1.1 encoder-decoder: gated `gelu_new` MLPs, called with input_ids= and
    decoder_input_ids=, returning a Seq2SeqModelOutput."""
    from transformers import T5Config, T5Model

    torch.manual_seed(SEED)
    cfg = T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=1,
                   num_decoder_layers=1, num_heads=4, feed_forward_proj="gated-gelu",
                   decoder_start_token_id=0, use_cache=False)
    return T5Model(cfg).eval()


def convnext() -> nn.Module:
    """ConvNeXt: exact GELU in each block, returns BaseModelOutputWithPoolingAndNoAttention."""
    from transformers import ConvNextConfig, ConvNextModel

    torch.manual_seed(SEED)
    cfg = ConvNextConfig(num_channels=3, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1],
                         image_size=32, patch_size=4)
    return ConvNextModel(cfg).eval()


def deberta() -> nn.Module:
    """DeBERTa-v2: relative attention masked with torch.finfo(torch.float32).min."""
    from transformers import DebertaV2Config, DebertaV2Model

    torch.manual_seed(SEED)
    cfg = DebertaV2Config(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1,
                          num_attention_heads=4, intermediate_size=64,
                          max_position_embeddings=64, relative_attention=True,
                          position_buckets=8, pos_att_type=["p2c", "c2p"])
    return DebertaV2Model(cfg).eval()


def whisper_encoder() -> nn.Module:
    """Whisper's audio encoder (two convolutions, exact `gelu` after each and in each MLP),
    called with input_features=, returning a BaseModelOutput. Its input length must be
    2 x max_source_positions."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(SEED)
    cfg = WhisperConfig(vocab_size=VOCAB, num_mel_bins=8, d_model=32, encoder_layers=1,
                        encoder_attention_heads=4, encoder_ffn_dim=64, decoder_layers=1,
                        decoder_attention_heads=4, decoder_ffn_dim=64,
                        max_source_positions=16, max_target_positions=16,
                        activation_function="gelu", pad_token_id=0, bos_token_id=0,
                        eos_token_id=0, decoder_start_token_id=0)
    return WhisperEncoder(cfg).eval()


def gpt_neox() -> nn.Module:
    """GPT-NeoX decoder (Pythia's architecture): rotary attention, a parallel residual and an
    exact `gelu` MLP, called with input_ids= and attention_mask=, returning its output
    object (no cache)."""
    from transformers import GPTNeoXConfig, GPTNeoXModel

    torch.manual_seed(SEED)
    cfg = GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=4, intermediate_size=64, hidden_act="gelu",
                        max_position_embeddings=64, rotary_pct=0.5, use_cache=False,
                        bos_token_id=0, eos_token_id=0)
    return GPTNeoXModel(cfg).eval()


def swin() -> nn.Module:
    """Swin: shifted-window attention and an exact `gelu` MLP in each of its two blocks,
    called with pixel_values=, returning SwinModelOutput (last_hidden_state, pooler_output)."""
    from transformers import SwinConfig, SwinModel

    torch.manual_seed(SEED)
    cfg = SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[1, 1],
                     num_heads=[2, 2], window_size=4, mlp_ratio=2.0, hidden_act="gelu")
    return SwinModel(cfg).eval()


class Float64Mlp(nn.Module):
    """A float64 MLP with a tanh GELU and GPT-2's hand-written gelu_new (as in ONNX Runtime's
    own fusion tests, which build float64 models)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)
        self.head = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.fc2(nn.functional.gelu(self.fc1(x), approximate="tanh"))
        g = 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * h ** 3)))
        return {"features": h, "logits": self.head(g)}


def float64_mlp() -> nn.Module:
    torch.manual_seed(SEED)
    return Float64Mlp().double().eval()


#: `--input` specs naming each model's forward() parameters (passed by keyword).
KEYWORD_INPUTS: dict[str, list[str]] = {
    "t5": [f"input_ids:1x8:int64:0,{VOCAB}", f"decoder_input_ids:1x4:int64:0,{VOCAB}"],
    "convnext": ["pixel_values:1x3x32x32"],
    "deberta": [f"input_ids:1x8:int64:0,{VOCAB}", "attention_mask:1x8:int64:1,2"],
    "float64_mlp": ["x:2x16"],
    "whisper_encoder": ["input_features:1x8x32"],
    "gpt_neox": [f"input_ids:1x8:int64:0,{VOCAB}", "attention_mask:1x8:int64:1,2"],
    "swin": ["pixel_values:1x3x32x32"],
}


def example_kwargs(name: str) -> dict[str, torch.Tensor]:
    """Keyword example inputs, as `KEYWORD_INPUTS` describes them (fixed seed)."""
    from export_gelu.exporter.inputs.specs import make_inputs, parse_input_spec

    dtype = torch.float64 if name == "float64_mlp" else None
    arrays = make_inputs([parse_input_spec(s) for s in KEYWORD_INPUTS[name]])
    return {k: torch.from_numpy(v).to(dtype) if dtype and v.dtype.kind == "f"
            else torch.from_numpy(v) for k, v in arrays.items()}


BUILDERS = {"t5": t5, "convnext": convnext, "deberta": deberta, "float64_mlp": float64_mlp,
            "whisper_encoder": whisper_encoder, "gpt_neox": gpt_neox, "swin": swin}


def save_exported(name: str, path: str) -> str:
    """torch.export.save of the model called with keyword inputs, returning its own output
    object: what `torch.export.export(hf_model, (), kwargs)` gives a user by default."""
    model = BUILDERS[name]()
    with torch.no_grad():
        program = torch.export.export(model, (), example_kwargs(name), strict=False)
    torch.export.save(program, path)
    return path


def save_torchscript(name: str, path: str) -> str:
    """torch.jit.trace with keyword example inputs (strict=False: dict outputs), saved."""
    model = BUILDERS[name]()
    with torch.no_grad():
        traced = torch.jit.trace(model, example_kwarg_inputs=example_kwargs(name), strict=False)
    torch.jit.save(traced, path)
    return path
