"""An ONNX Runtime session for a graph: explicit threads and no spinning (stable timings),
external data read from the model's own folder, non-UTF-8 paths, and the TensorRT GELU plugin
(which ONNX Runtime lacks) run as its math. The passes run graphs with it (checking an opset
conversion) and so do the checks (check/runners/ort_runner.py wraps it in polygraphy's runner)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from export_gelu.errors import BadInputError
from export_gelu.trt_parser.plugin import PLUGIN_OP

if TYPE_CHECKING:
    from onnxruntime import InferenceSession


def make_session(path: str | Path | bytes, threads: int = 1, optimize: bool = True,
                 providers: list | None = None, log_severity: int = 3,
                 weights_folder: str | None = None, *,
                 disabled_optimizers: list[str] | None = None,
                 ) -> InferenceSession:
    """An ORT session with `threads` intra-op threads and no spinning (stable timings), for a
    file or a serialized model.

    `providers`: provider names or (name, options) pairs, CPU only by default.
    `weights_folder`: where a serialized model's external data lies (onnx_weights.ort_source).
    `disabled_optimizers`: ONNX Runtime graph transformers not to run, by name.
    """
    import onnxruntime as ort

    from export_gelu.fspaths import utf8_path

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = log_severity
    if weights_folder is not None:
        from export_gelu.fspaths import utf8_alias

        opts.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                      utf8_alias(weights_folder))
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if not isinstance(path, bytes) and utf8_path(str(path)) is None:
        path, folder = _bytes_and_folder(Path(path))  # C++ cannot take the name
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                      folder)
    extra = {"disabled_optimizers": disabled_optimizers} if disabled_optimizers else {}
    try:
        return ort.InferenceSession(path if isinstance(path, bytes) else str(path),
                                    sess_options=opts,
                                    providers=providers or ["CPUExecutionProvider"], **extra)
    except Exception as exc:  # noqa: BLE001 - ORT raises its own Fail/InvalidGraph types
        msg = str(exc).strip().splitlines()[0][:300]
        if isinstance(path, bytes):
            raise BadInputError(f"ONNX Runtime cannot load the graph: {msg}") from exc
        if PLUGIN_OP not in msg:
            raise BadInputError(f"{path}: ONNX Runtime cannot load it: {msg}") from exc
    source = plugin_standin(path)  # the GELU plugin, which ORT lacks, as its math
    try:
        return ort.InferenceSession(source, sess_options=opts,
                                    providers=providers or ["CPUExecutionProvider"], **extra)
    except Exception as exc:  # noqa: BLE001 - ORT raises its own Fail/InvalidGraph types
        msg = str(exc).strip().splitlines()[0][:300]
        raise BadInputError(f"{path}: ONNX Runtime cannot load it, even with its {PLUGIN_OP} "
                            f"nodes as their math: {msg}") from exc


def _bytes_and_folder(path: Path) -> tuple[bytes, str]:
    """A model whose path is not UTF-8, as its bytes and the folder of its external data."""
    from export_gelu.fspaths import utf8_alias

    return path.read_bytes(), utf8_alias(path.resolve().parent)


def plugin_standin(path: str | Path) -> bytes | str:
    """`path` with its GELU plugin nodes replaced by their math (`plugin_math`), as bytes for
    ONNX Runtime, or the path of a copy with external data when it exceeds 2 GB."""
    import atexit
    import shutil
    import tempfile

    import onnx

    from export_gelu.passes.onnx.plugin_math import plugins_as_math

    model = onnx.load(str(path), load_external_data=True)
    try:
        plugins_as_math(model)
    except ValueError as exc:
        raise BadInputError(f"{path}: {exc}") from exc
    try:
        return model.SerializeToString()
    except ValueError:  # over protobuf's 2 GB
        tmp = tempfile.mkdtemp(prefix="export-gelu-plugin-math-")
        atexit.register(shutil.rmtree, tmp, True)
        out = Path(tmp) / "model.onnx"
        onnx.save(model, str(out), save_as_external_data=True, location="model.onnx.data")
        return str(out)
