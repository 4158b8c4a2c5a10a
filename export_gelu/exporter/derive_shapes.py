"""Derive each exporter's GELU node shapes by exporting the reference formulas with it.

    python -m export_gelu.exporter.derive_shapes            # print the table
    python -m export_gelu.exporter.derive_shapes --write    # regenerate exporter_shapes.py

A new torch release is a regeneration, not a hunt: the test suite re-derives the shapes
with the installed torch and fails when `exporter_shapes.py` no longer matches them.
Needs torch (the package itself does not, at run time).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from export_gelu import graph as G
from export_gelu.flags.parsers import ToolFlag, tool_parser
from export_gelu.passes.onnx.exporter_shapes import ExporterShape, Ref

if TYPE_CHECKING:
    import onnx_graphsurgeon as gs

#: (exporter, opset) pairs derived: dynamo's own range and two TorchScript opsets.
EXPORTS: tuple[tuple[str, int], ...] = (("dynamo", 18), ("dynamo", 19), ("dynamo", 20),
                                        ("torchscript", 13), ("torchscript", 17))


def reference_formulas() -> dict[str, tuple[str, Callable]]:
    """name → (kind, torch function): how PyTorch and HF write each GELU (docs/exporters.md)."""
    import torch
    import torch.nn.functional as F

    c = math.sqrt(2.0 / math.pi)
    return {
        # torch's own GELU, both modes
        "F.gelu(x)": ("exact", lambda x: F.gelu(x)),
        "F.gelu(x, approximate='tanh')": ("tanh", lambda x: F.gelu(x, approximate="tanh")),
        # HF gelu_new / gelu_python_tanh: 0.5*x*(1+tanh(c*(x+0.044715*pow(x,3.0))))
        "gelu_new": ("tanh", lambda x: 0.5 * x * (1.0 + torch.tanh(
            c * (x + 0.044715 * torch.pow(x, 3.0))))),
        # HF gelu_fast: 0.5*x*(1+tanh(x*0.7978845608*(1+0.044715*x*x)))
        "gelu_fast": ("tanh", lambda x: 0.5 * x * (1.0 + torch.tanh(
            x * 0.7978845608 * (1.0 + 0.044715 * x * x)))),
        # Bloom / Megatron: x*0.5*(1+tanh(0.79788456*x*(1+0.044715*x*x)))
        "Bloom": ("tanh", lambda x: x * 0.5 * (1.0 + torch.tanh(
            0.79788456 * x * (1 + 0.044715 * x * x)))),
        # HF gelu_python / ESM: x*0.5*(1+erf(x/sqrt(2)))
        "gelu_python": ("exact", lambda x: x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))),
        # HF quick_gelu (CLIP): x*sigmoid(1.702*x), its own kind
        "quick_gelu": ("quick", lambda x: x * torch.sigmoid(1.702 * x)),
    }


def export_references(exporter: str, opset: int) -> tuple[onnx.ModelProto, list[str]]:
    """One graph holding every reference formula, each on its own input (no shared CSE)."""
    import torch

    from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter

    formulas = reference_formulas()

    class References(torch.nn.Module):
        def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(f(x) for (_k, f), x in zip(formulas.values(), xs))

    args = tuple(torch.randn(2, 8) for _ in formulas)
    names = [f"x{i}" for i in range(len(formulas))]
    with quiet_exporter():
        if exporter == "dynamo":
            program = torch.onnx.export(References(), args, dynamo=True, opset_version=opset,
                                        input_names=names, verbose=False)
            assert program is not None  # dynamo=True returns the program
            model = program.model_proto
        else:
            buf: Any = io.BytesIO()  # the TorchScript exporter writes a file object too
            torch.onnx.export(References(), args, buf, dynamo=False, opset_version=opset,
                              input_names=names)
            model = onnx.load_from_string(buf.getvalue())
    return model, names


def extract_shape(model: onnx.ModelProto, x: str, output: str) -> tuple | None:
    """The nodes computing `output` from `x` as (op, refs) pairs; None if more than x feeds it."""
    with G.opened(model) as graph:
        return _shape_of(graph, x, output)


def _shape_of(graph: gs.Graph, x: str, output: str) -> tuple | None:
    tensors = G.tensors(graph)
    order: list = []

    def visit(tensor: gs.Tensor) -> bool:
        if tensor.name == x or G.is_weights(tensor) and G.constant_node(tensor) is None:
            return True
        node = G.producer(tensor)
        if node is None:
            return False
        if node.op == "Constant" or any(n is node for n in order):
            return True
        if not all(visit(i) for i in node.inputs):
            return False
        order.append(node)
        return True

    if output not in tensors or not visit(tensors[output]):
        return None
    index = {id(n.outputs[0]): i for i, n in enumerate(order)}
    nodes = []
    for node in order:
        refs: list[Ref] = []
        for t in node.inputs:
            if t.name == x:
                refs.append("x")
            elif id(t) in index:
                refs.append(index[id(t)])
            else:
                refs.append(float(np.asarray(G.value(t)).reshape(())))
        nodes.append((node.op, tuple(refs)))
    return tuple(nodes)


def derive() -> list[ExporterShape]:
    """Every exporter's shape of every reference formula (single `Gelu` nodes left out)."""
    formulas = reference_formulas()
    table: dict[tuple, ExporterShape] = {}
    for exporter, opset in EXPORTS:
        model, names = export_references(exporter, opset)
        for (name, (kind, _f)), x, out in zip(formulas.items(), names, model.graph.output):
            nodes = extract_shape(model, x, out.name)
            if nodes is None or len(nodes) < 2:
                continue
            made_by = f"{exporter} {opset}"
            old = table.get(nodes)
            if old is None:
                table[nodes] = ExporterShape(name, kind, (made_by,), nodes)
                continue
            formula = old.formula if name in old.formula.split(" / ") \
                else f"{old.formula} / {name}"
            by = old.exporters if made_by in old.exporters else (*old.exporters, made_by)
            table[nodes] = ExporterShape(formula, kind, by, nodes)
    return list(table.values())


def render(shapes: list[ExporterShape]) -> str:
    """exporter_shapes.py's SHAPES table as Python source."""
    lines = ["SHAPES: tuple[ExporterShape, ...] = ("]
    for s in shapes:
        lines.append(f"    ExporterShape({s.formula!r}, {s.kind!r},")
        lines.append(f"                  {s.exporters!r}, (")
        for op, refs in s.nodes:
            lines.append(f"                      ({op!r}, {refs!r}),")
        lines.append("                  )),")
    lines.append(")")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = tool_parser(__doc__.splitlines()[0], (
        ToolFlag(("--write",), {"action": "store_true",
                                "help": "regenerate exporter_shapes.py"}),))
    args = parser.parse_args(argv)
    table = render(derive())
    if not args.write:
        print(table, end="")
        return 0
    path = Path(__file__).parent.parent / "passes" / "onnx" / "exporter_shapes.py"
    text = path.read_text()
    head = text[: text.index("SHAPES: tuple[ExporterShape, ...] = (")]
    path.write_text(head + table)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
