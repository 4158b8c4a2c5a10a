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
4. Forms × runtimes: the Linear→GELU→Linear MLP exported with each GELU form (keep, erf,
   tanh, fused = opset-20 `Gelu`, plugin) and run by PyTorch CUDA, ONNX Runtime's CUDA
   provider, ONNX Runtime's TensorRT provider and TensorRT itself, all in one interleaved
   table. A cell whose runtime is missing, or cannot run that form (ONNX Runtime cannot run
   the plugin), is listed under the table with why.
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
    from export_gelu.check.runners.trt_runner import trt_unavailable_reason

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

    from export_gelu.check.runners.trt_runner import build_engine, build_engine_loader

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
    from export_gelu.check.runners.trt_runner import installed_profile

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


# ---------------------------------------------------------------- 4. forms × runtimes

#: (label, export-gelu target, --gelu form) per GELU form of the MLP.
FORMS = (("keep (primitives)", "trt8.6", "keep"), ("erf", "trt8.6", "erf"),
         ("tanh", "trt8.6", "tanh"), ("fused Gelu op", "trt10", "keep"),
         ("plugin", "trt10", "plugin"))


def _ort_cuda_call(path: Path, feed: dict[str, np.ndarray], providers: list[Any]
                   ) -> Callable[[], Any]:
    """A run of `path` on ORT `providers`, inputs and outputs bound on the GPU."""
    import onnxruntime as ort

    from export_gelu.check.runners.ort_runner import make_session

    session = make_session(path, 1, providers=providers)
    if session.get_providers()[0] != (providers[0] if isinstance(providers[0], str)
                                      else providers[0][0]):
        raise RuntimeError(f"{providers[0]} did not load (active: {session.get_providers()})")
    binding = session.io_binding()
    for name, value in feed.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
    for out in session.get_outputs():
        binding.bind_output(out.name, "cuda")

    def run() -> list[Any]:
        session.run_with_iobinding(binding)
        return [o.numpy() for o in binding.get_outputs()]
    return run


def forms_by_runtime_part(args: argparse.Namespace) -> str:
    why = torch_cuda_missing()
    if why:
        return f"skipped: {why}\n"
    from benchmarks import gelu_bound
    from benchmarks.graphs import export_gelu_file, save_program
    from export_gelu.check.runners import devices

    case = next(c for c in gelu_bound.cases() if c.model == "mlp" and c.kind == "exact")
    module = case.module()
    x = torch.randn(*case.shape, generator=torch.Generator().manual_seed(1))
    feed = {"x": x.numpy()}
    calls: list[Callable[[], Any]] = []
    labels: list[str] = []
    missing: list[str] = []
    runners: list[Any] = []
    ort_why = ort_cuda_missing()
    trt_ep_why = ort_why or (None if devices.TRT_EP in devices.available_providers()
                             else f"the installed onnxruntime has no {devices.TRT_EP}")
    with tempfile.TemporaryDirectory(prefix="bench-gpu-forms-") as tmp_root:
        tmp = Path(tmp_root)
        program = save_program(module, (x,), tmp / "mlp.pt")
        cuda_module = module.cuda().requires_grad_(False)
        xc = x.cuda()
        calls.append(_synchronized(lambda t: cuda_module(t), xc))
        labels.append("PyTorch CUDA eager (the model)")
        for label, target, form in FORMS:
            path = export_gelu_file(program, tmp / f"{form}.{target}.onnx", target, gelu=form)
            for runtime, why_not, make in (
                    ("ORT CUDA", ort_why or ("ONNX Runtime cannot run the plugin"
                                             if form == "plugin" else None),
                     lambda p=path: _ort_cuda_call(p, feed, CUDA_EP)),
                    ("ORT TensorRT", trt_ep_why or ("ONNX Runtime cannot run the plugin"
                                                    if form == "plugin" else None),
                     lambda p=path: _ort_cuda_call(p, feed, [
                         (devices.TRT_EP, devices.trt_ep_options("fp32", tmp)), *CUDA_EP])),
                    ("TensorRT", trt_missing(),
                     lambda p=path: _trt_call(p, feed, "fp32", runners))):
                if why_not:
                    missing.append(f"{runtime} × {label}: {why_not}")
                    continue
                try:
                    calls.append(make())
                    labels.append(f"{runtime}: {label}")
                except Exception as exc:  # noqa: BLE001 - a cell that fails is reported
                    missing.append(f"{runtime} × {label}: {type(exc).__name__}: {exc}"[:300])
        rounds, warmup = rounds_for(args, 200)
        try:
            comp = compare_calls(calls, labels, rounds, warmup, atol=1e-3)
        finally:
            for runner in runners:
                runner.deactivate()
    text = format_table(f"{case.name}: GELU forms × runtimes, fp32", comp)
    if missing:
        text += "\nNot measured:\n" + "\n".join(f"- {m}" for m in missing) + "\n"
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(p)
    args = p.parse_args(argv)
    load_before = load_average()
    parts = [("ONNX Runtime CUDA provider", ort_cuda_part),
             ("TensorRT engines", tensorrt_part),
             ("PyTorch CUDA eager, fused vs expanded GELU", torch_eager_part),
             ("GELU forms × runtimes (PyTorch CUDA, ORT CUDA, ORT TensorRT, TensorRT)",
              forms_by_runtime_part)]
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
