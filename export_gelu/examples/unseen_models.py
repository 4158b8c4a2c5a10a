"""Small models with the structure of ones users save that the tests had not seen: a UNet
block whose input and output are both `sample` (diffusers), a transformer block taking keyword
arguments that are `None` (diffusers' PixArt), a DiT-style attention, a ConvNeXt-V2 block
(LayerNorm over channels-last, GRN), and DeBERTa-style disentangled attention (SEW-D).

Each builder seeds itself, so a model built twice has the same weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

SEED = 0


class UNetBlock(nn.Module):
    """diffusers' UNet shape: `forward(sample, timestep)` returns `{"sample": …}`."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.time = nn.Linear(1, channels)
        self.conv_in = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.GroupNorm(2, channels)
        self.conv_out = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor) -> dict[str, torch.Tensor]:
        t = self.time(timestep.reshape(-1, 1))[:, :, None, None]
        h = F.gelu(self.norm(self.conv_in(sample) + t))
        return {"sample": sample + self.conv_out(h)}


class KeywordBlock(nn.Module):
    """PixArt's call shape: three tensors and keyword arguments that may be `None`."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.cross = nn.Linear(dim, dim)
        self.time = nn.Linear(1, dim)

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor,
                timestep: torch.Tensor, attention_mask: torch.Tensor | None = None,
                added_cond_kwargs: dict | None = None) -> torch.Tensor:
        h = self.proj(hidden_states) + self.time(timestep.reshape(-1, 1))[:, None, :]
        ctx = self.cross(encoder_hidden_states)
        scores = h @ ctx.transpose(1, 2) / math.sqrt(h.shape[-1])
        if attention_mask is not None:
            scores = scores + attention_mask
        return hidden_states + F.gelu(scores.softmax(-1) @ ctx)


class DiTAttention(nn.Module):
    """A DiT block's attention: LayerNorm, fused qkv, scaled_dot_product_attention, GELU MLP."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, n, 3, self.heads, d // self.heads) \
            .permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.out(a)
        return x + self.mlp(x)


class GRN(nn.Module):
    """ConvNeXt-V2's global response normalization (channels-last)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.randn(1, 1, 1, dim) * 0.1)
        self.beta = nn.Parameter(torch.randn(1, 1, 1, dim) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * nx) + self.beta + x


class ConvNeXtV2Block(nn.Module):
    """Depthwise conv, LayerNorm over channels-last, pointwise MLP with GELU and GRN."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1 = nn.Linear(dim, 4 * dim)
        self.grn = GRN(4 * dim)
        self.pw2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
        h = self.pw2(self.grn(F.gelu(self.pw1(h))))
        return x + h.permute(0, 3, 1, 2)


class ConvNeXtV2(nn.Module):
    """A stem, two ConvNeXt-V2 blocks, a LayerNorm'd pooled head."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 4, stride=4)
        self.stem_norm = nn.LayerNorm(dim, eps=1e-6)
        self.blocks = nn.Sequential(ConvNeXtV2Block(dim), ConvNeXtV2Block(dim))
        self.head_norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.stem_norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        x = self.blocks(x)
        return self.head(self.head_norm(x.mean((-2, -1))))


class DebertaAttention(nn.Module):
    """DeBERTa's disentangled self-attention (SEW-D's encoder): content and relative-position
    scores scaled by sqrt(d·3), a mask filled with the dtype's lowest value, GELU FFN."""

    def __init__(self, dim: int = 32, heads: int = 2, span: int = 8) -> None:
        super().__init__()
        self.heads, self.span = heads, span
        self.qkv = nn.Linear(dim, 3 * dim)
        self.pos = nn.Embedding(2 * span, dim)
        self.pos_k = nn.Linear(dim, dim)
        self.pos_q = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norm2 = nn.LayerNorm(dim)

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        return t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        q, k, v = (self._split(t) for t in self.qkv(x).chunk(3, -1))
        scale = math.sqrt(q.shape[-1] * 3)
        idx = torch.arange(n, device=x.device)
        rel = (idx[:, None] - idx[None, :]).clamp(-self.span, self.span - 1) + self.span
        pos = self.pos(rel)  # n × n × d
        pk = self.pos_k(pos).reshape(n, n, self.heads, -1).permute(2, 0, 1, 3)
        pq = self.pos_q(pos).reshape(n, n, self.heads, -1).permute(2, 0, 1, 3)
        c2c = q @ k.transpose(-1, -2)
        c2p = torch.einsum("bhid,hijd->bhij", q, pk)
        p2c = torch.einsum("bhjd,hijd->bhij", k, pq)
        scores = (c2c + c2p + p2c) / scale
        mask = attention_mask[:, None, None, :].bool()
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        probs = scores.softmax(-1).masked_fill(~mask, 0.0)
        a = (probs @ v).transpose(1, 2).reshape(x.shape)
        h = self.norm(x + self.out(a))
        return self.norm2(h + self.ffn(h))


def _seeded(cls: type[nn.Module]) -> nn.Module:
    torch.manual_seed(SEED)
    return cls().eval()


def unet_block() -> nn.Module:
    return _seeded(UNetBlock)


def keyword_block() -> nn.Module:
    return _seeded(KeywordBlock)


def dit_attention() -> nn.Module:
    return _seeded(DiTAttention)


def convnext_v2() -> nn.Module:
    return _seeded(ConvNeXtV2)


def deberta_attention() -> nn.Module:
    return _seeded(DebertaAttention)
