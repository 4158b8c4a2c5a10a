"""One GELU site found in an ONNX graph, as every recognition source reports it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_graphsurgeon as gs


@dataclass
class Match:
    """One GELU site: what computes it now, its input and output, and its canonical kind."""

    kind: str  # exact | tanh | quick
    shape: str  # what was matched, for the report
    x: gs.Tensor  # input tensor
    output: gs.Tensor  # output tensor (kept: its consumers and graph outputs see no change)
    nodes: list[gs.Node]  # nodes that compute it, root first (removed when it is rewritten)
    root: gs.Node  # the node producing `output`
    bias: gs.Tensor | None = None  # a bias tensor the site adds to x first (GELU(x + bias))
    bias_values: np.ndarray | None = None  # a bias held as an attribute (plugin nodes)
    bias_node: gs.Node | None = None  # the Add node a bias was folded from
    features: set[str] = field(default_factory=set)

    @property
    def has_bias(self) -> bool:
        return self.bias is not None or self.bias_values is not None

    def covers(self, node: gs.Node) -> bool:
        """Whether `node` is one of the site's nodes."""
        return any(n is node for n in self.nodes)
