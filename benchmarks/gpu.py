"""The same comparisons on a GPU: ONNX Runtime's CUDA provider, TensorRT engines built from
each target's graph, and PyTorch CUDA eager time of the fused vs expanded GELU.

    .venv/bin/python -m benchmarks.gpu [--rounds N] [--quick]

Each part runs where what it needs exists, and otherwise says why not (on a CPU machine:
"skipped: no GPU"), in its printout and in its RESULTS.md section:

1. ORT CUDA EP (`onnxruntime-gpu`): the GELU-bound cases of `benchmarks.gelu_bound` (dynamo
   opset 18 shapes) and the models of `benchmarks.whole_models`, the same graphs as on the
   CPU; inputs and outputs stay on the GPU (I/O binding) so the time is the graphs'.
2. TensorRT (`tensorrt` + a CUDA GPU): engines, built through export-gelu's polygraphy
   loaders (fp32, and fp16 where the installed TensorRT takes builder flags), from the raw
   export, from export-gelu `--target trt` (the installed TensorRT's profile) and from
   `--target onnx`; timed with inputs and outputs on the device.
3. PyTorch CUDA eager: `F.gelu` (one fused kernel) against the expanded erf and tanh
   formulas on x of 8×128×3072, fp32 and fp16: the memory-bound reference a fused GELU
   should approach.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import Variant, add_run_args, compare_variants, load_average, rounds_for
from benchmarks.harness import compare_calls, format_table

CUDA_EP = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def torch_cuda_missing() -> str | None:
    if not torch.cuda.is_available():
        return "no GPU (torch.cuda.is_available() is False)"
    return None


def ort_cuda_missing() -> str | None:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        return f"onnxruntime is not installed ({type(exc).__name__})"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return ("no GPU for ONNX Runtime (CUDAExecutionProvider not available; providers: "
                f"{', '.join(ort.get_available_providers())})")
    return torch_cuda_missing()


def trt_missing() -> str | None:
    from export_gelu.runtime.trt_runner import trt_unavailable_reason

    why = trt_unavailable_reason()
    return f"no GPU / TensorRT ({why})" if why else None


# ---------------------------------------------------------------- 1. ORT CUDA provider

def ort_cuda_part(args: argparse.Namespace) -> str:
    why = ort_cuda_missing()
    if why:
        return f"skipped: {why}\n"
    from benchmarks import gelu_bound, whole_models

    texts = []
    with tempfile.TemporaryDirectory(prefix="bench-gpu-ort-") as tmp_root:
        for i, case in enumerate(c for c in gelu_bound.cases() if c.exporter == "dynamo"):
            tmp = Path(tmp_root) / f"g{i}"
            tmp.mkdir()
            variants, feed = gelu_bound.make_variants(case, tmp)
            rounds, warmup = rounds_for(args, 300)
            _comp, text = compare_variants(f"CUDA EP: {case.name}", variants, feed, rounds,
                                           warmup, atol=1e-4, providers=CUDA_EP,
                                           replicas=args.replicas)
            texts.append(text)
        for case in whole_models.CASES:
            tmp = Path(tmp_root) / case.name
            tmp.mkdir()
            variants, feed = whole_models.make_variants(case, 2, tmp)
            rounds, warmup = rounds_for(args, 200)
            _comp, text = compare_variants(f"CUDA EP: {case.name}-style, 2 layers", variants,
                                           feed, rounds, warmup, atol=1e-3, providers=CUDA_EP,
                                           replicas=args.replicas)
            texts.append(text)
    return "\n".join(texts)


# ---------------------------------------------------------------- 2. TensorRT

def _trt_call(path: Path, feed: dict[str, np.ndarray], precision: str,
              runners: list[Any]) -> Callable[[], Any]:
    """A run of a TensorRT engine built from `path`, fed device tensors of the engine's
    input types; the activated runner is appended to `runners` (deactivate them after)."""
    from polygraphy.backend.trt import TrtRunner
    from polygraphy.datatype import DataType

    from export_gelu.runtime.trt_runner import build_engine, build_engine_loader

    shapes = {k: tuple(v.shape) for k, v in feed.items()}
    engine = build_engine(build_engine_loader(path, precision, shapes, []), path)
    runner = TrtRunner(engine)
    runner.activate()
    runners.append(runner)
    meta = runner.get_input_metadata(use_numpy_dtypes=False)
    device_feed = {}
    for name, value in feed.items():
        if name in meta:
            want = DataType.to_dtype(meta[name].dtype, "numpy")
            device_feed[name] = torch.from_numpy(np.ascontiguousarray(value.astype(want))).cuda()

    def run() -> list[Any]:
        out = runner.infer(device_feed, copy_outputs_to_host=False)
        torch.cuda.synchronize()
        return list(out.values())
    return run


def _trt_variants(raw: Path, module_file: Path | None, tmp: Path) -> list[Variant]:
    from benchmarks.graphs import export_gelu_file

    out = [Variant("raw export (dynamo, opset 18)", raw),
           Variant("export-gelu --target trt (from .onnx)",
                   export_gelu_file(raw, tmp / "trt_from_onnx.onnx", "trt"))]
    if module_file is not None:
        out += [Variant("export-gelu --target trt (from module)",
                        export_gelu_file(module_file, tmp / "trt_from_module.onnx", "trt")),
                Variant("export-gelu --target onnx (from module, opset 20)",
                        export_gelu_file(module_file, tmp / "onnx_from_module.onnx", "onnx"))]
    return out


def tensorrt_part(args: argparse.Namespace) -> str:
    why = trt_missing()
    if why:
        return f"skipped: {why}\n"
    from benchmarks import gelu_bound
    from benchmarks.graphs import export_raw, save_program
    from export_gelu.runtime.trt_runner import installed_profile

    builder = installed_profile()
    precisions = ["fp32"] + ([] if builder and builder.precision_api == "strongly_typed"
                             else ["fp16"])
    texts = []
    with tempfile.TemporaryDirectory(prefix="bench-gpu-trt-") as tmp_root:
        for i, case in enumerate(c for c in gelu_bound.cases() if c.exporter == "dynamo"):
            tmp = Path(tmp_root) / f"t{i}"
            tmp.mkdir()
            module = case.module()
            x = torch.randn(*case.shape, generator=torch.Generator().manual_seed(1))
            raw = export_raw(module, (x,), tmp / "raw.onnx", 18, input_names=["x"])
            program = save_program(module, (x,), tmp / "module.pt")
            variants = _trt_variants(raw, program, tmp)
            feed = {"x": x.numpy()}
            for precision in precisions:
                runners: list[Any] = []
                try:
                    calls = [_trt_call(v.path, feed, precision, runners) for v in variants
                             if v.path]
                    rounds, warmup = rounds_for(args, 300)
                    comp = compare_calls(calls, [v.label for v in variants if v.path], rounds,
                                         warmup, atol=1e-4 if precision == "fp32" else 2e-2)
                finally:
                    for runner in runners:
                        runner.deactivate()
                texts.append(format_table(f"TensorRT {builder.trt_version if builder else ''} "
                                          f"{precision}: {case.name}", comp))
    return "\n".join(texts)


# ---------------------------------------------------------------- 3. PyTorch CUDA eager

def _erf_expanded(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _tanh_expanded(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def _synchronized(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                  ) -> Callable[[], torch.Tensor]:
    """`fn(x)`, waiting for the device to finish (kernels launch asynchronously)."""
    def run() -> torch.Tensor:
        y = fn(x)
        if x.is_cuda:
            torch.cuda.synchronize()
        return y
    return run


def torch_eager_part(args: argparse.Namespace, device: str = "cuda",
                     shape: tuple[int, ...] = (8, 128, 3072)) -> str:
    """Fused vs expanded GELU in PyTorch eager (`device="cpu"` runs the same code on a CPU)."""
    why = torch_cuda_missing() if device == "cuda" else None
    if why:
        return f"skipped: {why}\n"
    texts = []
    for dtype in (torch.float32, torch.float16):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(1)).to(device, dtype)
        for kind, expanded in (("exact", _erf_expanded), ("tanh", _tanh_expanded)):
            approximate = "none" if kind == "exact" else "tanh"
            rounds, warmup = rounds_for(args, 500)
            comp = compare_calls(
                [_synchronized(lambda t, a=approximate: torch.nn.functional.gelu(
                    t, approximate=a), x), _synchronized(expanded, x)],
                [f"F.gelu(approximate={approximate!r}) (fused)", f"{kind} formula (expanded)"],
                rounds, warmup, atol=1e-4 if dtype == torch.float32 else 3e-2)
            texts.append(format_table(f"PyTorch {device} eager, {kind}, {str(dtype)[6:]}, "
                                      f"x {'×'.join(map(str, shape))}", comp))
    return "\n".join(texts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(p)
    args = p.parse_args(argv)
    load_before = load_average()
    parts = [("ONNX Runtime CUDA provider", ort_cuda_part),
             ("TensorRT engines", tensorrt_part),
             ("PyTorch CUDA eager, fused vs expanded GELU", torch_eager_part)]
    body = [f"Load average (1/5/15 min) at start {load_before}. Inputs and outputs stay on "
            "the GPU while timing; graphs in a table are timed interleaved in the same run(s) "
            "(ONNX Runtime tables pool --runs fresh runs of --replicas sessions per graph), "
            "ratios paired per round with bootstrap 95% intervals.\n"]
    for title, part in parts:
        text = part(args)
        print(f"\n{title}: {text}", flush=True)
        body.append(f"### {title}\n\n{text}")
    if not (args.quick or args.no_write):
        from benchmarks.results import write_section

        write_section("gpu", "\n".join(body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
