"""The node shapes PyTorch's exporters give each reference GELU formula.

Derived, not transcribed: `python -m export_gelu.exporter.derive_shapes --write` exports every
formula in `derive_shapes.reference_formulas()` with the dynamo exporter (opset 18–20) and the
TorchScript exporter (opset 13, 17) and rewrites the table below. Each node is
(op type, inputs); an input is "x" (the GELU's input), a float (a literal: an initializer
or a `Constant` node) or an int (the output of that earlier node). The last node's output
is the GELU's output.
"""

from __future__ import annotations

from typing import NamedTuple

Ref = str | float | int


class ExporterShape(NamedTuple):
    formula: str  # the reference formula, as PyTorch or HF writes it
    kind: str  # exact | tanh | quick
    exporters: tuple[str, ...]  # "dynamo 18", "torchscript 13", …
    nodes: tuple[tuple[str, tuple[Ref, ...]], ...]


# Generated below this line by `python -m export_gelu.exporter.derive_shapes --write`.
SHAPES: tuple[ExporterShape, ...] = (
    ExporterShape('F.gelu(x)', 'exact',
                  ('dynamo 18', 'dynamo 19'), (
                      ('Div', ('x', 1.4142135381698608)),
                      ('Erf', (0,)),
                      ('Add', (1, 1.0)),
                      ('Mul', (0.5, 2)),
                      ('Mul', ('x', 3)),
                  )),
    ExporterShape("F.gelu(x, approximate='tanh')", 'tanh',
                  ('dynamo 18', 'dynamo 19'), (
                      ('Pow', ('x', 3.0)),
                      ('Mul', (0.044714998453855515, 0)),
                      ('Add', ('x', 1)),
                      ('Mul', (0.7978845834732056, 2)),
                      ('Tanh', (3,)),
                      ('Add', (4, 1.0)),
                      ('Mul', (0.5, 5)),
                      ('Mul', ('x', 6)),
                  )),
    ExporterShape('gelu_new', 'tanh',
                  ('dynamo 18', 'dynamo 19', 'dynamo 20', 'torchscript 13', 'torchscript 17'), (
                      ('Mul', ('x', 0.5)),
                      ('Pow', ('x', 3.0)),
                      ('Mul', (1, 0.044714998453855515)),
                      ('Add', ('x', 2)),
                      ('Mul', (3, 0.7978845834732056)),
                      ('Tanh', (4,)),
                      ('Add', (5, 1.0)),
                      ('Mul', (0, 6)),
                  )),
    ExporterShape('gelu_fast / Bloom', 'tanh',
                  ('dynamo 18', 'dynamo 19', 'dynamo 20', 'torchscript 13', 'torchscript 17'), (
                      ('Mul', ('x', 0.5)),
                      ('Mul', ('x', 0.7978845834732056)),
                      ('Mul', ('x', 0.044714998453855515)),
                      ('Mul', (2, 'x')),
                      ('Add', (3, 1.0)),
                      ('Mul', (1, 4)),
                      ('Tanh', (5,)),
                      ('Add', (6, 1.0)),
                      ('Mul', (0, 7)),
                  )),
    ExporterShape('gelu_python', 'exact',
                  ('dynamo 18', 'dynamo 19', 'dynamo 20', 'torchscript 13', 'torchscript 17'), (
                      ('Mul', ('x', 0.5)),
                      ('Div', ('x', 1.4142135381698608)),
                      ('Erf', (1,)),
                      ('Add', (2, 1.0)),
                      ('Mul', (0, 3)),
                  )),
    ExporterShape('quick_gelu', 'quick',
                  ('dynamo 18', 'dynamo 19', 'dynamo 20', 'torchscript 13', 'torchscript 17'), (
                      ('Mul', ('x', 1.7020000219345093)),
                      ('Sigmoid', (0,)),
                      ('Mul', ('x', 1)),
                  )),
    ExporterShape('F.gelu(x)', 'exact',
                  ('torchscript 13', 'torchscript 17'), (
                      ('Div', ('x', 1.4142135381698608)),
                      ('Erf', (0,)),
                      ('Add', (1, 1.0)),
                      ('Mul', ('x', 2)),
                      ('Mul', (3, 0.5)),
                  )),
    ExporterShape("F.gelu(x, approximate='tanh')", 'tanh',
                  ('torchscript 13', 'torchscript 17'), (
                      ('Mul', ('x', 'x')),
                      ('Mul', ('x', 0)),
                      ('Mul', (0.044714998453855515, 1)),
                      ('Add', ('x', 2)),
                      ('Mul', (0.7978845834732056, 3)),
                      ('Tanh', (4,)),
                      ('Add', (1.0, 5)),
                      ('Mul', ('x', 6)),
                      ('Mul', (0.5, 7)),
                  )),
)
