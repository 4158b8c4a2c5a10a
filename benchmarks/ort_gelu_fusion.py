"""Does `export-gelu MODEL.onnx --target ort` make a dynamo-exported graph faster in ORT CPU?

    .venv/bin/python -m benchmarks.ort_gelu_fusion [--pairs 60] [--warmup 5] [--json out.json]

ONNX Runtime's own fusions miss the dynamo exporter's GELU shapes (docs/onnxruntime.md), so the
opset-18 file that `torch.onnx.export(..., dynamo=True)` writes runs GELU as 5–8 primitive
ops. Three cases, each exported with the dynamo exporter at opset 18 and rewritten by
`export_gelu.export(file, target="ort")` (the same code as the CLI):

- mlp:      Linear(768→3072) → GELU(tanh) → Linear(3072→768), two blocks, input 4×128×768;
- bias-tanh / bias-erf: y = GELU(x + b) + x with x of 8×128×3072, b a parameter.

Both files run in ORT CPU with default graph optimizations, one intra-op thread, spinning
off. Runs are paired and interleaved (input, output, output, input, …, alternating which
goes first); each pair gives a ratio output/input. Printed: each file's median latency,
the GELU ops ORT actually ran (from its optimized graph), and the median paired ratio with
a bootstrap 95% interval. Not a test: run it by hand, on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx

GELU_OPS = ("Erf", "Tanh", "Pow", "Gelu", "FastGelu", "BiasGelu", "QuickGelu")


@dataclass
class CaseResult:
    case: str
    input_ms: float
    output_ms: float
    ratio: float  # median of paired output/input ratios
    ci_low: float
    ci_high: float
    pairs: int
    input_gelu_ops: dict[str, int]  # GELU-related ops ORT runs after its own optimizations
    output_gelu_ops: dict[str, int]


def _models() -> dict[str, tuple[object, tuple]]:
    import torch
    from torch import nn

    class Mlp(nn.Module):
        def __init__(self, width: int = 768, blocks: int = 2) -> None:
            super().__init__()
            self.blocks = nn.Sequential(*[nn.Sequential(
                nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"),
                nn.Linear(4 * width, width)) for _ in range(blocks)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.blocks(x)

    class BiasGeluResidual(nn.Module):
        def __init__(self, approximate: str, width: int = 3072) -> None:
            super().__init__()
            self.b = nn.Parameter(torch.randn(width) * 0.1)
            self.approximate = approximate

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.gelu(x + self.b, approximate=self.approximate) + x

    torch.manual_seed(0)
    return {
        "mlp": (Mlp().eval(), (torch.randn(4, 128, 768),)),
        "bias-tanh": (BiasGeluResidual("tanh").eval(), (torch.randn(8, 128, 3072),)),
        "bias-erf": (BiasGeluResidual("none").eval(), (torch.randn(8, 128, 3072),)),
    }


def _export_dynamo18(module: object, args: tuple, path: Path) -> None:
    import torch

    from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter

    with quiet_exporter():
        torch.onnx.export(module, args, str(path), dynamo=True, opset_version=18,
                          input_names=["x"])


def _session(path: Path, optimized: Path | None = None):  # -> ort.InferenceSession
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = 3
    if optimized is not None:
        opts.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _gelu_ops_after_ort(path: Path, tmp: Path) -> dict[str, int]:
    """GELU-related op counts in the graph ORT actually runs (after its own fusions)."""
    optimized = tmp / f"{path.stem}.ort-optimized.onnx"
    _session(path, optimized)
    counts = Counter(n.op_type for n in onnx.load(str(optimized)).graph.node)
    return {op: counts[op] for op in GELU_OPS if counts[op]}


def _bootstrap_median_ci(ratios: np.ndarray, rounds: int = 2000) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    samples = rng.choice(ratios, size=(rounds, len(ratios)), replace=True)
    medians = np.median(samples, axis=1)
    return float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def time_pair(a: Path, b: Path, feed: dict[str, np.ndarray], pairs: int,
              warmup: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair latencies (s) of `a` and `b`, run interleaved, alternating which goes first."""
    sa, sb = _session(a), _session(b)
    for _ in range(warmup):
        sa.run(None, feed)
        sb.run(None, feed)
    ta, tb = np.empty(pairs), np.empty(pairs)
    for i in range(pairs):
        order = ((sa, ta), (sb, tb)) if i % 2 == 0 else ((sb, tb), (sa, ta))
        for sess, out in order:
            start = time.perf_counter()
            sess.run(None, feed)
            out[i] = time.perf_counter() - start
    return ta, tb


def run_case(name: str, module: object, args: tuple, tmp: Path, pairs: int,
             warmup: int) -> CaseResult:
    from export_gelu import export

    src, dst = tmp / f"{name}.onnx", tmp / f"{name}.ort.onnx"
    _export_dynamo18(module, args, src)
    export(src, target="ort", output=dst, verify=False)
    feed = {"x": args[0].numpy()}
    ref, new = _session(src).run(None, feed)[0], _session(dst).run(None, feed)[0]
    assert np.abs(ref - new).max() <= 1e-4 * max(1.0, float(np.abs(ref).max())), name
    t_in, t_out = time_pair(src, dst, feed, pairs, warmup)
    ratios = t_out / t_in
    low, high = _bootstrap_median_ci(ratios)
    return CaseResult(name, float(np.median(t_in) * 1e3), float(np.median(t_out) * 1e3),
                      float(np.median(ratios)), low, high, pairs,
                      _gelu_ops_after_ort(src, tmp), _gelu_ops_after_ort(dst, tmp))


def main(argv: list[str] | None = None) -> list[CaseResult]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--cases", nargs="*", default=None, help="mlp bias-tanh bias-erf")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    results = []
    with tempfile.TemporaryDirectory(prefix="ort-gelu-fusion-") as tmp:
        for name, (module, inputs) in _models().items():
            if args.cases and name not in args.cases:
                continue
            r = run_case(name, module, inputs, Path(tmp), args.pairs, args.warmup)
            results.append(r)
            print(f"{r.case:<10} input {r.input_ms:8.2f} ms  →ort {r.output_ms:8.2f} ms  "
                  f"ratio {r.ratio:.3f} [95% CI {r.ci_low:.3f}, {r.ci_high:.3f}], "
                  f"{r.pairs} pairs; ORT runs {r.input_gelu_ops} → {r.output_gelu_ops}",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
