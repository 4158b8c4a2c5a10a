"""ONNX Runtime sessions with explicit threads, wrapped in polygraphy's OnnxrtRunner."""

from __future__ import annotations

from pathlib import Path

from polygraphy.backend.onnxrt import OnnxrtRunner

from export_gelu.passes.ort_session import make_session, plugin_standin

__all__ = ["make_session", "plugin_standin", "ort_runner", "output_names"]


def ort_runner(path: str | Path, threads: int = 1, name: str = "onnxruntime") -> OnnxrtRunner:
    return OnnxrtRunner(make_session(path, threads, log_severity=4), name=name)


def output_names(path: str | Path) -> list[str]:
    """The graph's output names, from the run's one parse of the file (onnx_file)."""
    from export_gelu.onnx_file import read_structure

    return [o.name for o in read_structure(path).graph.output]
