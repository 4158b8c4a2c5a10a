"""What export-gelu itself costs: wall time per stage on a 24-layer GPT-2-style model, and
ONNX-pass time on synthetic graphs of 1k, 10k and 100k nodes.

    .venv/bin/python -m benchmarks.toolchain_cost [--widths 64,768] [--repeats 3] [--quick]

A. A GPT-2-style decoder (`--layers` 24, each of `--widths`, 64-wide heads, `gelu_new`: one
   hand-written tanh formula per layer) is saved two ways and exported with `export_gelu.export(...,
   target="ort")` `--repeats` times each: as a state_dict with `--model-factory` (load
   builds the module, capture runs `torch.export`) and as an ExportedProgram (capture is
   nearly free, so the passes' share is the largest an export shows). Parity is verified
   (`--iterations 0`: no latency timing, whose cost is the user's choice). The per-stage
   times are the report's own `stage_seconds` (load, capture, fx_passes, export,
   onnx_passes, checks, save, verify). Target: fx + ONNX passes < 5% of the export.
B. Synthetic graphs (`benchmarks.synthetic_graphs`: chains of exporter-made blocks mixing
   eight GELU spellings with Add/Relu/Mul) of 1k, 10k and 100k nodes go through
   `export_gelu.export(graph.onnx, target=...)`; the report's `onnx_passes` time is the
   pass cost. Target: 10k → 100k grows ≤ 12× (linear is 10×).

Peak memory of exporting a model with more than 2 GB of weights is measured by
`benchmarks.big_model` (its own section of RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import onnx
import torch

from benchmarks.common import Verdict, load_average

PASS_SHARE_LIMIT = 0.05
GROWTH_LIMIT = 12.0
SIZE_ENV = "EXPORT_GELU_BENCH_GPT2"  # "layers,width" for the --model-factory below
STAGES = ("load", "capture", "fx_passes", "export", "onnx_passes", "checks", "save", "verify")
SEQ, VOCAB = 128, 1000


def gpt2_model() -> torch.nn.Module:
    """The benchmark's GPT-2-style model: a `--model-factory`, sized by $EXPORT_GELU_BENCH_GPT2
    ("layers,width"; 64-wide heads)."""
    from transformers import GPT2Config, GPT2Model

    from examples.models import HiddenStates

    layers, width = (int(v) for v in os.environ.get(SIZE_ENV, "24,768").split(","))
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_embd=width, n_layer=layers, n_head=max(1, width // 64),
                     n_positions=512, activation_function="gelu_new", bos_token_id=0,
                     eos_token_id=0)
    return HiddenStates(GPT2Model(cfg), "input_ids").eval()


def _stage_runs(model: Path, out: Path, repeats: int, **kw: Any) -> list[dict[str, float]]:
    from benchmarks.graphs import quiet
    from export_gelu import export

    runs = []
    for _ in range(repeats):
        with quiet():
            rep = export(model, target="ort", output=out, **kw)
        if rep.parity.status == "failed":
            raise RuntimeError(f"parity failed on {model.name}: {rep.parity.reason}")
        runs.append(dict(rep.stage_seconds))
    return runs


def _median_stages(runs: list[dict[str, float]]) -> dict[str, float]:
    keys = [k for k in STAGES if any(k in r for r in runs)] + sorted(
        {k for r in runs for k in r} - set(STAGES))
    return {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}


def stage_table(layers: int, width: int, repeats: int) -> tuple[str, list[Verdict]]:
    """Part A: per-stage medians for both input formats, and the passes' share."""
    os.environ[SIZE_ENV] = f"{layers},{width}"
    model = gpt2_model()
    x = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(1))
    params = sum(p.numel() for p in model.parameters())
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-toolchain-") as tmp:
        sd = Path(tmp) / "gpt2.state_dict.pt"
        torch.save(model.state_dict(), str(sd))
        ep = Path(tmp) / "gpt2.exported.pt"
        from benchmarks.graphs import save_program

        save_program(model, (x,), ep)
        del model
        spec = f"x:1x{SEQ}:int64:0,{VOCAB}"
        print(f"A. GPT-2-style {layers} layers, width {width}: state_dict + --model-factory",
              flush=True)
        rows["state_dict + --model-factory"] = _median_stages(_stage_runs(
            sd, Path(tmp) / "a.onnx", repeats, input=[spec], iterations=0,
            model_factory="benchmarks.toolchain_cost:gpt2_model"))
        print("   ExportedProgram", flush=True)
        rows["ExportedProgram"] = _median_stages(_stage_runs(ep, Path(tmp) / "b.onnx",
                                                             repeats, iterations=0))
        split = _onnx_pass_split(Path(tmp) / "b.onnx")
    stages = [s for s in STAGES if any(s in r for r in rows.values())]
    head = "| input | " + " | ".join(stages) + " | total s | passes share of export | " \
        "passes share of total |"
    lines = [f"#### Stage wall times, GPT-2-style, {layers} layers, width {width} "
             f"({params / 1e6:.1f}M parameters), seq {SEQ}, `--target ort`, median of "
             f"{repeats}", "", head, "|---|" + "---:|" * (len(stages) + 3)]
    verdicts = []
    for name, st in rows.items():
        total = sum(st.values())
        export_only = total - st.get("verify", 0.0)
        passes = st.get("fx_passes", 0.0) + st.get("onnx_passes", 0.0)
        lines.append(f"| {name} | " + " | ".join(f"{st.get(s, 0.0):.2f}" for s in stages)
                     + f" | {total:.1f} | {passes / export_only:.2%} | {passes / total:.2%} |")
        verdicts.append(Verdict(
            f"{layers} layers, width {width}, {name}: fx + ONNX passes < 5% of the export time",
            passes / export_only < PASS_SHARE_LIMIT,
            f"{passes:.2f} s of {export_only:.1f} s without verify = "
            f"{passes / export_only:.2%} ({passes / total:.2%} with parity verification)"))
    lines.append("")
    lines.append("\"passes share of export\" divides by every stage but verify (the strict "
                 "measure); \"of total\" includes the parity check. `onnx_passes` is the GELU "
                 "passes (`run_onnx_passes`) plus fitting the graph to the target "
                 f"(`fit_to_profile`); run once more on the produced graph with its weights "
                 f"loaded, they took {split[0]:.2f} s and {split[1]:.2f} s.")
    return "\n".join(lines) + "\n", verdicts


def _onnx_pass_split(path: Path) -> tuple[float, float]:
    """Seconds of `run_onnx_passes` and of `fit_to_profile` on one ONNX file (weights loaded)."""
    from export_gelu.passes.compat import fit_to_profile
    from export_gelu.passes.onnx import run_onnx_passes
    from export_gelu.targets import PROFILES

    model = onnx.load(str(path))
    start = time.perf_counter()
    model, _sites = run_onnx_passes(model, PROFILES["ort"])
    middle = time.perf_counter()
    fit_to_profile(model, PROFILES["ort"])
    return middle - start, time.perf_counter() - middle


def pass_growth(sizes: list[int], targets: list[str], repeats: int) -> tuple[str, list[Verdict]]:
    """Part B: ONNX-pass time (the report's `onnx_passes`) on synthetic graphs."""
    from benchmarks.graphs import quiet
    from benchmarks.synthetic_graphs import synthetic_graph
    from export_gelu import export

    results: dict[tuple[str, int], tuple[float, int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-synthetic-") as tmp:
        for n in sizes:
            model, kinds = synthetic_graph(n)
            path = Path(tmp) / f"synthetic_{n}.onnx"
            onnx.save(model, str(path))
            nodes = len(model.graph.node)
            del model
            for target in targets:
                times, sites = [], 0
                for _ in range(repeats if n < 100_000 else max(1, repeats - 1)):
                    with quiet():
                        rep = export(path, target=target, output=Path(tmp) / "out.onnx",
                                     verify=False)
                    times.append(rep.stage_seconds["onnx_passes"])
                    sites = len(rep.gelu_sites)
                results[(target, n)] = (statistics.median(times), nodes, sites)
                print(f"B. {nodes} nodes, --target {target}: {sites} GELU sites, ONNX passes "
                      f"{statistics.median(times):.3f} s", flush=True)
    lines = ["#### ONNX-pass time on synthetic graphs (median wall seconds of the report's "
             "`onnx_passes`)", "",
             "| target | nodes | GELU sites found | ONNX passes s | µs per node | growth vs "
             "previous size |", "|---|---:|---:|---:|---:|---:|"]
    verdicts = []
    for target in targets:
        prev = None
        for n in sizes:
            t, nodes, sites = results[(target, n)]
            growth = f"{t / prev[0]:.1f}× for {nodes / prev[1]:.1f}× nodes" if prev else ""
            lines.append(f"| {target} | {nodes} | {sites} | {t:.3f} | {1e6 * t / nodes:.1f} | "
                         f"{growth} |")
            prev = (t, nodes)
        if 10_000 in sizes and 100_000 in sizes:
            ratio = results[(target, 100_000)][0] / results[(target, 10_000)][0]
            verdicts.append(Verdict(f"--target {target}: ONNX pass time 10k → 100k nodes "
                                    f"≤ {GROWTH_LIMIT:g}×", ratio <= GROWTH_LIMIT,
                                    f"{ratio:.1f}× (linear: 10×)"))
    return "\n".join(lines) + "\n", verdicts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--widths", default="64,768",
                   help="model widths for part A (64: graph-bound; 768: GPT-2's own width)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sizes", default="1000,10000,100000", help="synthetic graph node counts")
    p.add_argument("--targets", default="ort,onnx", help="targets for the synthetic graphs")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: 4 layers, width 64, 1k/10k nodes, 1 repeat; no write")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.layers, args.widths, args.repeats, args.sizes = 4, "64", 1, "1000,10000"
    load_before = load_average()
    start = time.perf_counter()
    tables, v_a = [], []
    for width in (int(w) for w in args.widths.split(",")):
        table, verdicts = stage_table(args.layers, width, args.repeats)
        print(table, flush=True)
        tables.append(table)
        v_a += verdicts
    stages = "\n".join(tables)
    growth, v_b = pass_growth([int(s) for s in args.sizes.split(",")],
                              args.targets.split(","), args.repeats)
    print(growth, flush=True)
    checks = v_a + v_b
    lines = [v.line() for v in checks]
    print("\n".join(lines))
    body = (f"Wall times from the report's `stage_seconds` of real `export_gelu.export` runs "
            f"(the CLI's code path), {os.cpu_count()} CPUs shared; load average (1/5/15 min) "
            f"at start {load_before}, at end {load_average()}; the script took "
            f"{time.perf_counter() - start:.0f} s.\n\n**Targets (issue 7)**\n\n"
            + "\n".join(lines) + "\n\n" + stages + "\n" + growth
            + "\nPeak memory of exporting and rewriting a model with more than 2 GB of "
              "weights: see the [big_model](#big_model) section "
              "(`python -m benchmarks.big_model`).\n")
    if not (args.quick or args.no_write):
        from benchmarks.results import write_section

        write_section("toolchain_cost", body)
    return 0 if all(v.ok for v in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
