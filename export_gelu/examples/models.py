"""Example architectures with random weights: BERT, GPT-2, ViT, CLIP, Bloom, a Gemma-style
decoder (transformers configs) and an LSTM regressor. Each builder is also a
`--model-factory` for its state_dict.

Sizes are small so that the tests run on two CPU cores; the layer structure (and so every
GELU site) is that of the real architecture.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

SEED = 0
VOCAB = 1000
SEQ = 16


class HiddenStates(nn.Module):
    """Wraps a transformers model so it takes one tensor and returns `last_hidden_state`."""

    def __init__(self, model: nn.Module, kwarg: str) -> None:
        super().__init__()
        self.model = model
        self.kwarg = kwarg

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(**{self.kwarg: x}).last_hidden_state


class LSTMRegressor(nn.Module):
    """LSTM → Linear → GELU → Linear: a sequence regressor with one exact GELU."""

    def __init__(self, features: int = 8, hidden: int = 32, out: int = 1) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, batch_first=True)
        self.fc1 = nn.Linear(hidden, hidden * 2)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden * 2, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq, _ = self.lstm(x)
        return self.fc2(self.act(self.fc1(seq[:, -1])))


def bert() -> nn.Module:
    return HiddenStates(bert_model(), "input_ids").eval()


def bert_model() -> nn.Module:
    """BERT as transformers ships it: input_ids, attention_mask and token_type_ids, passed by
    keyword (`--input input_ids:… --input attention_mask:… --input token_type_ids:…`)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(SEED)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, max_position_embeddings=64, hidden_act="gelu")
    return BertModel(cfg, add_pooling_layer=False).eval()


def _gpt2(**extra: object) -> nn.Module:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(SEED)
    cfg = GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                     activation_function="gelu_new", bos_token_id=0, eos_token_id=0, **extra)
    return GPT2Model(cfg).eval()


def gpt2() -> nn.Module:
    return HiddenStates(_gpt2(), "input_ids").eval()


def gpt2_model() -> nn.Module:
    """GPT-2 as transformers ships it: input_ids and attention_mask (causal attention with
    padding), returning its output object; no cache, so `last_hidden_state` is the output."""
    return _gpt2(use_cache=False)


def vit() -> nn.Module:
    return HiddenStates(vit_model(), "pixel_values").eval()


def vit_model() -> nn.Module:
    """ViT as transformers ships it: pixel_values (3x32x32, 16 patches of 8x8), returning its
    output object (no pooler)."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(SEED)
    cfg = ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=256, image_size=32, patch_size=8, hidden_act="gelu")
    return ViTModel(cfg, add_pooling_layer=False).eval()


def clip() -> nn.Module:
    """CLIP's text encoder: its MLPs use QuickGELU (`quick_gelu`), which is not a GELU."""
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(SEED)
    cfg = CLIPTextConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
                         hidden_act="quick_gelu", bos_token_id=0, eos_token_id=2, pad_token_id=1)
    return HiddenStates(CLIPTextModel(cfg), "input_ids").eval()


def bloom() -> nn.Module:
    """Bloom: its MLPs write the tanh GELU by hand (`x*0.5*(1+tanh(0.79788456*x*(…)))`)."""
    from transformers import BloomConfig, BloomModel

    torch.manual_seed(SEED)
    cfg = BloomConfig(vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4)
    return HiddenStates(BloomModel(cfg), "input_ids").eval()


def gemma() -> nn.Module:
    """A Gemma-style decoder (GeGLU MLPs, `gelu_pytorch_tanh`: F.gelu(approximate='tanh'))."""
    from transformers import GemmaConfig, GemmaModel

    torch.manual_seed(SEED)
    cfg = GemmaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                      head_dim=16, max_position_embeddings=64, hidden_act="gelu_pytorch_tanh")
    return HiddenStates(GemmaModel(cfg), "input_ids").eval()


def lstm() -> nn.Module:
    torch.manual_seed(SEED)
    return LSTMRegressor().eval()


@dataclass(frozen=True)
class Example:
    """A bundled example: its builder, input spec (as `--input` takes it) and GELU census."""

    name: str
    factory: str  # for --model-factory
    input_spec: str
    gelu_sites: int  # GELUs in the model (MLP activations)
    gelu_kind: str  # exact | tanh


#: This module's importable name, for `--model-factory` (installed with the package).
_HERE = "export_gelu.examples.models"

EXAMPLES: dict[str, Example] = {
    "bert": Example("bert", f"{_HERE}:bert", f"x:2x{SEQ}:int64:0,{VOCAB}", 2, "exact"),
    "gpt2": Example("gpt2", f"{_HERE}:gpt2", f"x:2x{SEQ}:int64:0,{VOCAB}", 2, "tanh"),
    "vit": Example("vit", f"{_HERE}:vit", "x:2x3x32x32:float32", 2, "exact"),
    "lstm": Example("lstm", f"{_HERE}:lstm", "x:4x10x8:float32", 1, "exact"),
}


#: More architectures, one per GELU spelling family (CLIP's QuickGELU, Bloom's hand-written
#: tanh, Gemma's F.gelu tanh). Kept out of EXAMPLES so the every-format end-to-end matrix
#: stays fast; tests/e2e/test_fx_models.py exports them.
MORE_EXAMPLES: dict[str, Example] = {
    "clip": Example("clip", f"{_HERE}:clip", f"x:2x{SEQ}:int64:0,{VOCAB}", 2, "quick"),
    "bloom": Example("bloom", f"{_HERE}:bloom", f"x:2x{SEQ}:int64:0,{VOCAB}", 2, "tanh"),
    "gemma": Example("gemma", f"{_HERE}:gemma", f"x:2x{SEQ}:int64:0,{VOCAB}", 2, "tanh"),
}


def build(name: str) -> nn.Module:
    return {"bert": bert, "gpt2": gpt2, "vit": vit, "lstm": lstm}[name]()
