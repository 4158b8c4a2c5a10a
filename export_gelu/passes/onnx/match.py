"""One GELU site found in an ONNX graph, as every recognition source reports it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Match:
    """One GELU site: what computes it now, its input and output, and its canonical kind."""

    kind: str  # exact | tanh | quick
    shape: str  # what was matched, for the report
    x: str  # input tensor
    output: str  # output tensor (kept: its consumers and graph outputs see no change)
    nodes: list[str]  # nodes that compute it (removed when the site is rewritten)
    root: str  # the node producing `output`
    bias: str | None = None  # a bias tensor the site adds to x first (GELU(x + bias))
    bias_values: np.ndarray | None = None  # a bias held as an attribute (plugin nodes)
    bias_node: str | None = None  # the Add node a bias was folded from
    features: set[str] = field(default_factory=set)

    @property
    def has_bias(self) -> bool:
        return self.bias is not None or self.bias_values is not None
