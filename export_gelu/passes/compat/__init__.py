"""Fit a graph to a target profile beyond GELU: opset ceiling and ops the target lacks.

Two hooks, called by the export pipeline:
- `prepare_program_for_opset(program, opset)`: torch-level rewrites an old opset needs
  before export (e.g. attention that the TorchScript exporter cannot emit below opset 14).
- `fit_to_profile(model, profile)`: ONNX-level rewrites after the GELU passes (e.g.
  LayerNormalization expansion, opset down-conversion); returns notes for the report.
"""

from __future__ import annotations

from typing import Any

import onnx

from export_gelu.targets import TargetProfile


def prepare_program_for_opset(program: Any, opset: int) -> list[str]:
    """Rewrite `program` in place for export at `opset`; return notes for the report."""
    return []


def fit_to_profile(model: onnx.ModelProto, profile: TargetProfile
                   ) -> tuple[onnx.ModelProto, list[str]]:
    """`model` rewritten to fit `profile`'s opset ceiling and ops; notes for the report."""
    return model, []
