"""The small MLP the quantization tests use for an outlier-heavy layer: two channels of fc1's
output (hence of fc2's input, read after a GELU) ~300× the rest, and fc2's weights for them
as much smaller, so the other channels still carry the signal (LLM-style outliers)."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """Linear → GELU → Linear → GELU → Linear, from 16 features to 8; `hidden`: the two
    hidden widths."""

    def __init__(self, hidden: tuple[int, int] = (32, 32)) -> None:
        super().__init__()
        a, b = hidden
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, a), nn.Linear(a, b), nn.Linear(b, 8)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.act(self.fc2(self.act(self.fc1(x)))))


def outlier_mlp() -> MLP:
    """The MLP (seed 0, eval) with its outlier channels; it takes x of shape (N, 16)."""
    torch.manual_seed(0)
    module = MLP().eval()
    with torch.no_grad():
        module.fc1.bias[:2] = 300.0
        module.fc2.weight[:, :2] /= 300.0
    return module
