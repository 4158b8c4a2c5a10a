"""INT8 side by side on ONNX Runtime CPU: fp32, export-gelu's quantization, ONNX Runtime's
`quantize_static` with its defaults and `quantize_dynamic`, and NVIDIA Model Optimizer where
its venv exists, on BERT, GPT-2 and ViT.

    .venv/bin/python -m benchmarks.quantization [--layers 2] [--rounds N] [--quick]

Each model is built from a transformers config with random weights and its task head, so
that the output is logits (BertForMaskedLM, GPT2LMHeadModel: vocabulary 1000; ViT image
classification: 1000 labels), hidden 768, 12 heads, intermediate 3072, `--layers` layers,
1×128 tokens or one 224×224 image. It is exported by export-gelu for `--target trt8.6`: the
fp32 graph every other row starts from. Rows:

- export-gelu INT8: `plan_quantization` → `calibrate` (default calibrator) → `lower` for
  trt8.6 (float weights → Q → DQ, per channel; activations per tensor; no GELU tensor);
- the same graph in a session with ONNX Runtime's `MatMulAddFusion` off: that fusion turns
  MatMul + bias Add into a float Gemm before the QDQ fusions run, so the products stay in
  float; without it they become MatMulIntegerToFloat (integer kernels);
- the same plan lowered for `--target ort`: pre-quantized INT8 weights in 7 bits (ONNX
  Runtime's U8S8 kernels on x86 without VNNI sum u8·s8 pairs in 16 bits and saturate with
  full-range weights), in a session with MatMulAddFusion off;
- `quantize_static(fp32, calibration data)` with every default (QDQ, QInt8/QInt8, MinMax,
  every op type), the bar the issue sets;
- `quantize_dynamic(fp32)` with its defaults (weights INT8, activations quantized at run time);
- NVIDIA Model Optimizer's ONNX INT8 PTQ (`benchmarks/modelopt_int8.py`), run in its own venv
  at /tmp/modelopt-venv where one exists (its defaults, calibrated on the CPU provider, kept
  fp32), on the same fp32 graph and calibration feeds.

Accuracy on held-out feeds (not the calibration ones), each graph in the session it is timed
in: SQNR and cosine of the logits against the fp32 graph, top-1 agreement per position.
Latency: the harness's paired, interleaved timing (ratio to fp32, bootstrap 95% interval).
Graph size: the file's bytes. Targets checked (issue 42), on BERT: export-gelu's INT8 for
ONNX Runtime at least as accurate as quantize_static's defaults, and faster than fp32.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch

from benchmarks.common import Verdict, add_run_args, load_average, ratio_text, rounds_for
from benchmarks.graphs import quiet
from benchmarks.harness import compare_calls, format_table, pool

HIDDEN, HEADS, SEQ, VOCAB = 768, 12, 128, 1000
TARGET = "trt8.6"
FP32 = "fp32 (export-gelu --target trt8.6)"
OURS = "export-gelu INT8 (trt8.6 Q/DQ)"
OURS_NOMAF = "export-gelu INT8 (trt8.6 Q/DQ), MatMulAddFusion off"
OURS_ORT = "export-gelu INT8 --target ort (7-bit weights), MatMulAddFusion off"
STATIC = "quantize_static defaults"
DYNAMIC = "quantize_dynamic defaults"
MODELOPT = "NVIDIA Model Optimizer INT8 (own venv)"
MODELOPT_PYTHON = Path("/tmp/modelopt-venv/bin/python")


def _heads(hidden: int) -> int:
    return HEADS if hidden % HEADS == 0 else 4


def _bert(layers: int, hidden: int, image: int) -> torch.nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers,
                     num_attention_heads=_heads(hidden), intermediate_size=4 * hidden,
                     max_position_embeddings=512, hidden_act="gelu")
    return BertForMaskedLM(cfg)


def _gpt2(layers: int, hidden: int, image: int) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=VOCAB, n_embd=hidden, n_layer=layers, n_head=_heads(hidden),
                     n_positions=512, activation_function="gelu_new", bos_token_id=0,
                     eos_token_id=0, use_cache=False)
    return GPT2LMHeadModel(cfg)


def _vit(layers: int, hidden: int, image: int) -> torch.nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(hidden_size=hidden, num_hidden_layers=layers,
                    num_attention_heads=_heads(hidden), intermediate_size=4 * hidden,
                    image_size=image, patch_size=16, hidden_act="gelu", num_labels=1000)
    return ViTForImageClassification(cfg)


class Logits(torch.nn.Module):
    """A transformers model called with one tensor, returning its logits."""

    def __init__(self, model: torch.nn.Module, kwarg: str) -> None:
        super().__init__()
        self.model, self.kwarg = model, kwarg

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(**{self.kwarg: x}).logits


@dataclass(frozen=True)
class Case:
    name: str
    build: object  # (layers, hidden, image size) -> module
    kwarg: str

    def feed(self, seed: int, image: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        if self.name == "ViT":
            return rng.standard_normal((1, 3, image, image)).astype(np.float32)
        return rng.integers(0, VOCAB, (1, SEQ)).astype(np.int64)


CASES = (Case("BERT", _bert, "input_ids"), Case("GPT-2", _gpt2, "input_ids"),
         Case("ViT", _vit, "pixel_values"))


def _session(path: Path, threads: int, disabled: list[str] | None = None):  # noqa: ANN202
    from export_gelu.passes.ort_session import make_session

    return make_session(path, threads=threads, disabled_optimizers=disabled)


def _quantize_static(src: Path, dst: Path, feeds: list[dict[str, np.ndarray]]) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    with quiet():
        quantize_static(str(src), str(dst), Reader())
    return dst


def _quantize_dynamic(src: Path, dst: Path) -> Path:
    from onnxruntime.quantization import quantize_dynamic

    with quiet():
        quantize_dynamic(str(src), str(dst))
    return dst


def _ours(src: Path, dst: Path, feeds: list[dict[str, np.ndarray]],
          target: str = TARGET) -> tuple[Path, str]:
    from export_gelu.quantize import calibrate, lower, method_for, plan_quantization, route_for
    from export_gelu.targets import resolve_profile

    model = onnx.load(str(src))
    plan = plan_quantization(model, "int8")
    ranges = calibrate(model, plan.activations, feeds, method_for("int8", None))
    quantized = lower(model, plan, ranges, route_for(resolve_profile(target), "int8"))
    onnx.save(quantized.model, str(dst))
    skipped = "; ".join(sorted({s.reason for s in plan.skipped})) or "none"
    return dst, (f"{len(plan.points)}/{plan.weight_products} weight products quantized "
                 f"({plan.coverage:.0%}); left in float: {skipped}")


def _modelopt(src: Path, dst: Path, feeds: list[dict[str, np.ndarray]]
              ) -> tuple[Path | None, str]:
    """Model Optimizer's INT8 in its own venv, or why there is none."""
    if not MODELOPT_PYTHON.exists():
        return None, (f"no Model Optimizer venv at {MODELOPT_PYTHON.parent.parent} (make it: "
                      "python -m venv /tmp/modelopt-venv && /tmp/modelopt-venv/bin/pip install "
                      "'nvidia-modelopt[onnx]')")
    calib = dst.with_suffix(".calib.npz")
    np.savez(calib, **{k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]})
    script = Path(__file__).with_name("modelopt_int8.py")
    done = subprocess.run([str(MODELOPT_PYTHON), str(script), str(src), str(dst), str(calib)],
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0 or not dst.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"Model Optimizer failed: {tail[0][:300]}"
    info = json.loads(done.stdout.strip().splitlines()[-1])
    return dst, f"nvidia-modelopt {info['version']}, {info['seconds']:.0f} s"


def _export(case: Case, layers: int, hidden: int, image: int, path: Path) -> Path:
    from export_gelu import api

    torch.manual_seed(0)
    module = Logits(case.build(layers, hidden, image), case.kwarg).eval()  # type: ignore[operator]
    x = torch.from_numpy(case.feed(0, image))
    with quiet():
        api.export(module, args=(x,), target=TARGET, output=path, verify=False)
    return path


def _accuracy(fp32: list[np.ndarray], out: list[np.ndarray]) -> dict[str, float]:
    from export_gelu.quantize.metrics import cosine, sqnr_db, top1_agreement

    ref = np.concatenate([f.ravel() for f in fp32])
    test = np.concatenate([o.ravel() for o in out])
    return {"sqnr": sqnr_db(ref, test), "cosine": cosine(ref, test),
            "top1": float(np.mean([top1_agreement(a, b) for a, b in zip(fp32, out)]))}


def _size_mb(path: Path) -> float:
    extra = path.with_name(path.name + ".data")
    return (path.stat().st_size + (extra.stat().st_size if extra.exists() else 0)) / 1e6


def _checks(rows: list[tuple[str, Path, list[str] | None]], accuracy: list[dict[str, float]],
            comp) -> list[Verdict]:  # noqa: ANN001 - a harness.Comparison
    by = dict(zip([r[0] for r in rows], accuracy))
    checks = [Verdict("BERT: export-gelu INT8 for ONNX Runtime at least as accurate as "
                      "quantize_static defaults (SQNR of the logits on held-out feeds)",
                      by[OURS_ORT]["sqnr"] >= by[STATIC]["sqnr"],
                      f"{by[OURS_ORT]['sqnr']:.1f} dB vs {by[STATIC]['sqnr']:.1f} dB; the "
                      f"trt8.6 Q/DQ graph: {by[OURS]['sqnr']:.1f} dB as written, "
                      f"{by[OURS_NOMAF]['sqnr']:.1f} dB in ORT's integer kernels")]
    r, lo, hi = comp.paired(OURS_ORT, FP32)
    checks.append(Verdict("BERT: export-gelu INT8 for ONNX Runtime faster than fp32 on ONNX "
                          "Runtime CPU", hi < 1.0,
                          f"{OURS_ORT} / fp32: {ratio_text(r, lo, hi)}; the trt8.6 graph with "
                          f"ORT's defaults: {ratio_text(*comp.paired(OURS, FP32))}"))
    return checks


def run_case(case: Case, args: argparse.Namespace, tmp: Path) -> tuple[str, list[Verdict]]:
    image = 64 if args.quick else 224
    hidden = 96 if args.quick else HIDDEN
    fp32_path = _export(case, args.layers, hidden, image, tmp / "fp32.onnx")
    inp = onnx.load(str(fp32_path), load_external_data=False).graph.input[0].name
    calib = [{inp: case.feed(100 + i, image)} for i in range(args.calibration)]
    held = [{inp: case.feed(1000 + i, image)} for i in range(args.held_out)]
    ours, coverage = _ours(fp32_path, tmp / "ours.onnx", calib)
    ours_ort, _ = _ours(fp32_path, tmp / "ours_ort.onnx", calib, "ort")
    static = _quantize_static(fp32_path, tmp / "static.onnx", calib)
    dynamic = _quantize_dynamic(fp32_path, tmp / "dynamic.onnx")
    rows: list[tuple[str, Path, list[str] | None]] = [
        (FP32, fp32_path, None), (OURS, ours, None), (OURS_NOMAF, ours, ["MatMulAddFusion"]),
        (OURS_ORT, ours_ort, ["MatMulAddFusion"]), (STATIC, static, None),
        (DYNAMIC, dynamic, None)]
    modelopt, modelopt_note = (_modelopt(fp32_path, tmp / "modelopt.onnx", calib)
                               if not args.no_modelopt else (None, "left out (--no-modelopt)"))
    if modelopt is not None:
        rows.append((MODELOPT, modelopt, None))
    sessions = [_session(path, args.threads, disabled) for _, path, disabled in rows]
    outputs = [[s.run(None, f)[0] for f in held] for s in sessions]
    accuracy = [_accuracy(outputs[0], o) for o in outputs]
    rounds, warmup = rounds_for(args, 30)
    feed = held[0]
    runs = []
    for run in range(max(1, args.runs)):
        fresh = [_session(path, args.threads, disabled) for _, path, disabled in rows]
        calls = [lambda s=s: s.run(None, feed) for s in fresh]
        runs.append(compare_calls(calls, [r[0] for r in rows], rounds, warmup,
                                  atol=math.inf, seed=run))
    comp = pool(runs)
    shape = "1×128 tokens" if case.name != "ViT" else f"one {image}² image"
    title = f"{case.name}, {args.layers} layers, hidden {hidden}, {shape}, logits"
    table = ["| graph | size MB | SQNR dB | cosine | top-1 agreement | median ms | "
             "ratio to fp32 [95%] |", "|---|---:|---:|---:|---:|---:|---|"]
    for (label, path, _), acc, t in zip(rows, accuracy, comp):
        sq = "∞" if math.isinf(acc["sqnr"]) else f"{acc['sqnr']:.1f}"
        table.append(f"| {label} | {_size_mb(path):.1f} | {sq} | {acc['cosine']:.5f} | "
                     f"{acc['top1']:.3f} | {t.median_ms:.2f} | "
                     f"{ratio_text(t.ratio, t.ratio_lo, t.ratio_hi)} |")
    text = (f"#### {title}\n\n" + "\n".join(table) + "\n\n"
            f"export-gelu: {coverage}. Model Optimizer: {modelopt_note}. Accuracy on "
            f"{len(held)} held-out feeds (calibration: {len(calib)} others).\n\n"
            + format_table(f"{case.name}: timing", comp))
    print(text, flush=True)
    return text, (_checks(rows, accuracy, comp) if case.name == "BERT" else [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(p)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--calibration", type=int, default=16, help="calibration feeds")
    p.add_argument("--held-out", type=int, default=16, help="held-out feeds for accuracy")
    p.add_argument("--only", default="", help="run only models whose name contains this")
    p.add_argument("--no-modelopt", action="store_true",
                   help="leave NVIDIA Model Optimizer out even where its venv exists")
    args = p.parse_args(argv)
    load_before = load_average()
    torch.set_num_threads(max(1, args.threads))
    sections, checks = [], []
    with tempfile.TemporaryDirectory(prefix="bench-quant-") as tmp_root:
        for case in CASES:
            if args.only.lower() not in case.name.lower():
                continue
            tmp = Path(tmp_root) / case.name
            tmp.mkdir()
            text, found = run_case(case, args, tmp)
            sections.append(text)
            checks += found
    print("\n".join(v.line() for v in checks))
    body = (f"ONNX Runtime CPU EP, {args.threads} intra-op thread(s), spinning off; every graph "
            f"of a table timed in the same run, interleaved in rotating order ({args.runs} "
            f"fresh run(s), pooled); load average (1/5/15 min) at start {load_before}, at end "
            f"{load_average()}.\n\n**Targets (issue 42)**\n\n"
            + "\n".join(v.line() for v in checks) + "\n\n" + "\n".join(sections))
    if not (args.quick or args.no_write):
        from benchmarks.results import write_section

        write_section("quantization", body)
    return 0 if all(v.ok for v in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
