"""The ONNX files a benchmark compares, each made the way its user would make it.

- `export_raw`: plain `torch.onnx.export` (dynamo exporter at opset ≥ 18, TorchScript below,
  or when asked): what users get today.
- `ort_optimize`: ONNX Runtime's transformers optimizer (`onnxruntime.transformers.optimizer`)
  on that file, where it imports: the other tool users reach for.
- `export_gelu_onnx` / `export_gelu_module`: export-gelu's output for a target, from the raw
  `.onnx` file or from the PyTorch module (saved as an ExportedProgram first), through the
  public `export_gelu.export` with verification off (the benchmark checks outputs itself).

Every function returns the path it wrote, or None with the reason printed when the tool is
not available.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
import torch


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence exporter and optimizer chatter (prints, warnings, INFO logs)."""
    from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter

    names = ("onnxruntime", "onnxruntime.transformers", "fusion", "onnx_model", "optimizer")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with quiet_exporter(), warnings.catch_warnings(), contextlib.redirect_stderr(
                io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def export_raw(module: torch.nn.Module, args: tuple[Any, ...], path: Path, opset: int,
               dynamo: bool = True, input_names: list[str] | None = None) -> Path:
    """`torch.onnx.export` as a user calls it, at `opset` (weights inside the file)."""
    names = input_names or [f"input_{i}" for i in range(len(args))]
    with quiet(), torch.no_grad():
        if dynamo:
            program = torch.onnx.export(module, args, dynamo=True, opset_version=opset,
                                        input_names=names, verbose=False)
            onnx.save(program.model_proto, str(path))
        else:
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=opset,
                              input_names=names, do_constant_folding=True)
    got = _opset(onnx.load(str(path), load_external_data=False))
    if got != opset:
        raise RuntimeError(f"asked torch.onnx.export for opset {opset}, got {got}")
    return path


def _opset(model: onnx.ModelProto) -> int:
    return next(int(i.version) for i in model.opset_import if i.domain in ("", "ai.onnx"))


def ort_optimizer_missing() -> str | None:
    """None when ONNX Runtime's transformers optimizer imports; else why not."""
    try:
        import onnxruntime.transformers.optimizer  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means "not here"
        return f"onnxruntime.transformers.optimizer does not import ({type(exc).__name__})"
    return None


def ort_optimize(src: Path, dst: Path, model_type: str = "bert", num_heads: int = 0,
                 hidden_size: int = 0, use_gpu: bool = False) -> tuple[Path | None, str]:
    """ONNX Runtime's offline transformers optimizer with its defaults for `model_type`.

    Returns (path, note): the path is None when the optimizer is missing or fails on this
    graph, and the note says why (a failure is a result, not a crash of the benchmark).
    """
    why = ort_optimizer_missing()
    if why:
        return None, why
    from onnxruntime.transformers.optimizer import optimize_model

    try:
        with quiet():
            optimized = optimize_model(str(src), model_type=model_type, num_heads=num_heads,
                                       hidden_size=hidden_size, use_gpu=use_gpu)
            optimized.save_model_to_file(str(dst))
    except Exception as exc:  # noqa: BLE001 - report the optimizer's failure, go on
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        return None, (f"optimize_model(model_type={model_type!r}) failed on this graph: "
                      f"{type(exc).__name__} {first}".strip())
    return dst, f"model_type={model_type!r}"


def save_program(module: torch.nn.Module, args: tuple[Any, ...], path: Path) -> Path:
    """The module as an ExportedProgram file (`torch.export.save`), carrying `args`."""
    with quiet(), torch.no_grad():
        torch.export.save(torch.export.export(module, args, strict=False), str(path))
    return path


def export_gelu_file(model: Path, dst: Path, target: str, opset: int | None = None,
                     gelu: str = "keep") -> Path:
    """export-gelu's output for `target` (and `--gelu`) from a model file (ONNX or
    ExportedProgram)."""
    import export_gelu

    with quiet():
        export_gelu.export(model, target=target, output=dst, opset=opset, gelu=gelu,
                           verify=False)
    return dst


def op_summary(path: Path) -> str:
    """The GELU-relevant ops of a file, e.g. `ms.BiasGelu×2, Gemm×4` (`ms.`: com.microsoft)."""
    model = onnx.load(str(path), load_external_data=False)
    counts: dict[str, int] = {}
    for node in model.graph.node:
        op = f"ms.{node.op_type}" if node.domain == "com.microsoft" else node.op_type
        counts[op] = counts.get(op, 0) + 1
    keep = ("Gelu", "ms.Gelu", "ms.FastGelu", "ms.BiasGelu", "ms.QuickGelu", "Erf", "Tanh",
            "Pow", "ms.Attention", "ms.SkipLayerNormalization", "LayerNormalization", "MatMul",
            "Gemm", "ms.FusedMatMul")
    parts = [f"{op}×{counts[op]}" for op in keep if counts.get(op)]
    return f"opset {_opset(model)}, {len(model.graph.node)} nodes: " + ", ".join(parts)


def session_op_summary(path: Path, providers: list[str] | None = None) -> str:
    """`op_summary` of the graph ONNX Runtime actually runs (after its online optimizer)."""
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="ort-optimized-") as tmp:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        try:
            ort.InferenceSession(str(path), sess_options=opts,
                                 providers=providers or ["CPUExecutionProvider"])
            return op_summary(Path(opts.optimized_model_filepath))
        except Exception as exc:  # noqa: BLE001 - informative only; timing does not need it
            return f"(not available: {type(exc).__name__})"
