"""ONNX Runtime sessions with explicit threads, wrapped in polygraphy's OnnxrtRunner."""

from __future__ import annotations

from pathlib import Path

from polygraphy.backend.onnxrt import OnnxrtRunner

from export_gelu.errors import BadInputError


def make_session(path: str | Path, threads: int = 1, optimize: bool = True,
                 providers: list | None = None, log_severity: int = 3
                 ):  # -> onnxruntime.InferenceSession
    """An ORT session with `threads` intra-op threads and no spinning (stable timings).

    `providers`: provider names or (name, options) pairs, CPU only by default.
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = log_severity
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(str(path), sess_options=opts,
                                    providers=providers or ["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own Fail/InvalidGraph types
        msg = str(exc).strip().splitlines()[0][:300]
        raise BadInputError(f"{path}: ONNX Runtime cannot load it: {msg}") from exc


def ort_runner(path: str | Path, threads: int = 1, name: str = "onnxruntime") -> OnnxrtRunner:
    return OnnxrtRunner(make_session(path, threads), name=name)


def output_names(path: str | Path) -> list[str]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return [o.name for o in model.graph.output]
