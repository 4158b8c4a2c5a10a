"""Synthetic ONNX graphs of a chosen size: chains of blocks mixing GELU spellings and
ordinary ops, for measuring how the ONNX passes' time grows with the graph.

Each block is `relu(GELU(x + b)) * s + x` with GELU written one of several ways. The
blocks are not transcribed by hand: each is exported once from a small PyTorch module by the
exporter that writes it that way (the dynamo exporter at opset 18, the TorchScript exporter
at 17), and the chain repeats those node lists with fresh tensor names and per-block
constants, so the graph holds what exporters really emit, at any size.

    spellings: F.gelu exact and tanh (both exporters), GPT-2's `gelu_new`, Bloom's
    factored tanh, the hand-written erf formula, and QuickGELU (a site, never a GELU)
"""

from __future__ import annotations

import functools
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

WIDTH = 64  # elements per row of the chain's tensor: the graph, not the data, is measured
OPSET = 18


def _gelu_new(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3.0))))


def _bloom(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def _erf_formula(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _quick(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x)


#: (name, function, exporter, kind of the GELU site it holds)
SPELLINGS = (
    ("gelu_exact_dynamo", lambda x: torch.nn.functional.gelu(x), "dynamo", "exact"),
    ("gelu_tanh_dynamo", lambda x: torch.nn.functional.gelu(x, approximate="tanh"), "dynamo",
     "tanh"),
    ("gelu_exact_torchscript", lambda x: torch.nn.functional.gelu(x), "torchscript", "exact"),
    ("gelu_tanh_torchscript", lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
     "torchscript", "tanh"),
    ("gelu_new", _gelu_new, "dynamo", "tanh"),
    ("bloom_gelu", _bloom, "dynamo", "tanh"),
    ("erf_formula", _erf_formula, "dynamo", "exact"),
    ("quick_gelu", _quick, "dynamo", "quick"),
)


class _Block(torch.nn.Module):
    def __init__(self, fn) -> None:  # noqa: ANN001 - one of SPELLINGS' functions
        super().__init__()
        self.fn = fn
        self.b = torch.nn.Parameter(torch.linspace(-0.5, 0.5, WIDTH))
        self.s = torch.nn.Parameter(torch.full((WIDTH,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fn(x + self.b)) * self.s + x


@dataclass(frozen=True)
class Template:
    """One block as exported: its nodes, its constants, its input and output names."""

    name: str
    kind: str
    nodes: tuple[onnx.NodeProto, ...]
    initializers: tuple[onnx.TensorProto, ...]
    x: str
    y: str


def _export_block(name: str, fn, exporter: str, kind: str) -> Template:  # noqa: ANN001
    from benchmarks.graphs import export_raw

    with tempfile.TemporaryDirectory(prefix="synthetic-") as tmp:
        path = Path(tmp) / f"{name}.onnx"
        export_raw(_Block(fn).eval(), (torch.randn(1, WIDTH),), path,
                   OPSET if exporter == "dynamo" else 17, dynamo=exporter == "dynamo",
                   input_names=["x"])
        model = onnx.load(str(path))
    graph = model.graph
    return Template(name, kind, tuple(graph.node), tuple(graph.initializer),
                    graph.input[0].name, graph.output[0].name)


@functools.cache
def templates() -> tuple[Template, ...]:
    """Every spelling's block, exported once per process."""
    return tuple(_export_block(*s) for s in SPELLINGS)


def _rename(names: list[str], mapping: dict[str, str]) -> list[str]:
    return [mapping.get(n, n) if n else n for n in names]


def synthetic_graph(nodes: int, seed: int = 0) -> tuple[onnx.ModelProto, dict[str, int]]:
    """A chain of blocks with at least `nodes` nodes; returns it and its GELU sites per kind.

    Block i uses spelling i mod len(SPELLINGS); its constants are the template's, each
    perturbed by a hair (1e-7 relative) so blocks share nothing but stay recognisable.
    """
    rng = np.random.default_rng(seed)
    temps = templates()
    out_nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    kinds: dict[str, int] = {}
    current = "x"
    i = 0
    while len(out_nodes) < nodes:
        t = temps[i % len(temps)]
        prefix = f"b{i}_"
        mapping = {t.x: current}
        for init in t.initializers:
            mapping[init.name] = prefix + init.name
            arr = numpy_helper.to_array(init)
            if arr.dtype.kind == "f" and arr.size > 1:
                arr = (arr * (1.0 + 1e-7 * rng.standard_normal(arr.shape))).astype(arr.dtype)
            inits.append(numpy_helper.from_array(arr, prefix + init.name))
        for node in t.nodes:
            for o in node.output:
                mapping[o] = prefix + o
        for node in t.nodes:
            new = onnx.NodeProto()
            new.CopyFrom(node)
            new.name = prefix + (node.name or node.op_type)
            del new.input[:]
            new.input.extend(_rename(list(node.input), mapping))
            del new.output[:]
            new.output.extend(_rename(list(node.output), mapping))
            out_nodes.append(new)
        current = mapping[t.y]
        kinds[t.kind] = kinds.get(t.kind, 0) + 1
        i += 1
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, WIDTH])
    out = helper.make_node("Identity", [current], ["y"], name="output_identity")
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, WIDTH])
    graph = helper.make_graph(out_nodes + [out], f"synthetic_{nodes}", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="export-gelu benchmarks")
    model.ir_version = 8
    return model, kinds


__all__ = ["synthetic_graph", "templates", "SPELLINGS", "WIDTH"]
