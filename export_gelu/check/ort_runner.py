"""ONNX Runtime sessions with explicit threads, wrapped in polygraphy's OnnxrtRunner."""

from __future__ import annotations

from pathlib import Path

from polygraphy.backend.onnxrt import OnnxrtRunner

from export_gelu.passes.ort_session import make_session, plugin_standin

__all__ = ["make_session", "plugin_standin", "ort_runner", "output_names"]


def ort_runner(path: str | Path, threads: int = 1, name: str = "onnxruntime") -> OnnxrtRunner:
    return OnnxrtRunner(make_session(path, threads, log_severity=4), name=name)


def output_names(path: str | Path) -> list[str]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return [o.name for o in model.graph.output]
