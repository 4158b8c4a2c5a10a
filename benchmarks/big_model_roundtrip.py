"""A model whose weights exceed 2 GB: export, rewrite and verify with external data, measuring
peak memory of each step and checking that no weight changed a single byte.

    python -m benchmarks.big_model_roundtrip                  # 9 × Linear(8192)+GELU, 2.4 GB
    python -m benchmarks.big_model_roundtrip --width 2048 --layers 4   # a quick dry run

Steps, each in its own process (so each peak is that step's alone):
1. build   (not measured) an ExportedProgram of `layers` × (Linear(width, width) + GELU),
           and the SHA-256 of every parameter;
2. export  `export-gelu big.pt --target ort` (torch → ONNX with external data, GELU passes,
           parity against PyTorch in ONNX Runtime, latency);
3. rewrite `export-gelu big.ort.onnx --target trt8.6` (the .onnx-input path: GELUs lowered to
           primitives for TensorRT 8.6, opset 20 → 17, parity input-vs-output in ORT).

Peak RSS is measured two ways: `os.wait4`'s `ru_maxrss` for the step's process (the kernel's
high-water mark) and a thread polling /proc/<pid>/status every 20 ms (for the timeline).
Checksums: each torch parameter's bytes must appear unchanged (or, for a Linear weight the
exporter stored transposed, unchanged once transposed back) among the export's initializers,
and every initializer of the export must be byte-identical, under the same name, in the
rewrite. A benchmark, not a test: it needs ~3× the weight size in free RAM and a few minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BUILD = r'''
import hashlib, json, sys, torch
from torch import nn
width, layers, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
mods = []
for _ in range(layers):
    lin = nn.Linear(width, width)
    with torch.no_grad():
        lin.weight.mul_(0.5)  # keep activations O(1) through the stack
    mods += [lin, nn.GELU()]
model = nn.Sequential(*mods).eval()
ep = torch.export.export(model, (torch.randn(2, width),))
with open(out, "wb") as fh:
    torch.export.save(ep, fh)
sums = {}
for name, p in model.state_dict().items():
    t = p.detach().contiguous()
    entry = {"sha": hashlib.sha256(t.numpy().tobytes()).hexdigest(), "bytes": t.nbytes}
    if t.dim() == 2:
        entry["sha_t"] = hashlib.sha256(t.t().contiguous().numpy().tobytes()).hexdigest()
    sums[name] = entry
json.dump(sums, open(out + ".sha.json", "w"))
'''


@dataclass
class StepResult:
    name: str
    returncode: int
    wall_s: float
    peak_rss: int  # bytes, from wait4
    polled_peak: int  # bytes, from the polling thread
    samples: list[tuple[float, int]] = field(default_factory=list)
    stderr: str = ""


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_step(name: str, cmd: list[str], log: Path) -> StepResult:
    """Run `cmd`, polling its RSS; the peak comes from the kernel (wait4) at the end."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.monotonic()
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=err, stderr=subprocess.STDOUT)
        samples: list[tuple[float, int]] = []
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                samples.append((time.monotonic() - start, _rss(proc.pid)))
                done.wait(0.02)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        _pid, status, usage = os.wait4(proc.pid, 0)
        done.set()
        thread.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    return StepResult(name, proc.returncode, wall, usage.ru_maxrss * 1024,
                      max((r for _t, r in samples), default=0), samples, log.read_text())


def _external_tensors(path: Path):
    """(name, dims, sha256) of each initializer, reading external data tensor by tensor."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    base = path.parent
    for init in model.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in init.external_data}
            with (base / info["location"]).open("rb") as fh:
                fh.seek(int(info.get("offset", 0)))
                data = fh.read(int(info["length"]))
        else:
            data = init.raw_data
        yield init.name, tuple(init.dims), hashlib.sha256(data).hexdigest(), len(data)


def check_checksums(sums_json: Path, exported: Path, rewritten: Path) -> dict[str, object]:
    torch_sums = json.loads(sums_json.read_text())
    exp = {name: (dims, sha, n) for name, dims, sha, n in _external_tensors(exported)}
    rew = {name: (dims, sha, n) for name, dims, sha, n in _external_tensors(rewritten)}
    exp_shas = {sha for _d, sha, _n in exp.values()}
    torch_found = {n: ("as is" if s["sha"] in exp_shas else
                       "transposed" if s.get("sha_t") in exp_shas else "MISSING")
                   for n, s in torch_sums.items()}
    changed = [n for n, (_d, sha, _n) in exp.items() if n in rew and rew[n][1] != sha]
    lost = [n for n in exp if n not in rew and exp[n][2] > 1024]
    return {
        "torch_params": len(torch_sums),
        "torch_bytes": sum(s["bytes"] for s in torch_sums.values()),
        "torch_params_found_in_export": sum(v != "MISSING" for v in torch_found.values()),
        "torch_params_transposed": sum(v == "transposed" for v in torch_found.values()),
        "torch_params_missing": [n for n, v in torch_found.items() if v == "MISSING"],
        "export_initializers": len(exp),
        "export_initializer_bytes": sum(n for _d, _s, n in exp.values()),
        "identical_after_rewrite": sum(1 for n in exp if n in rew and rew[n][1] == exp[n][1]),
        "changed_by_rewrite": changed,
        "lost_by_rewrite": lost,
    }


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--width", type=int, default=8192)
    p.add_argument("--layers", type=int, default=9)
    p.add_argument("--workdir", type=Path, default=ROOT / "build" / "big_model")
    p.add_argument("--keep", action="store_true", help="keep the (large) files afterwards")
    p.add_argument("--no-results", action="store_true", help="do not write RESULTS.md")
    args = p.parse_args(argv)

    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    model, exported, rewritten = work / "big.pt", work / "big.ort.onnx", work / "big.trt86.onnx"
    py = sys.executable
    cli = [py, "-m", "export_gelu.cli"]
    timing = ["--iterations", "3", "--warmup", "1"]
    steps: list[StepResult] = []
    try:
        print(f"building {args.layers} × Linear({args.width}) + GELU …", flush=True)
        build = run_step("build", [py, "-c", BUILD, str(args.width), str(args.layers),
                                   str(model)], work / "build.log")
        if build.returncode != 0:
            print(build.stderr[-3000:])
            return 1
        weight_bytes = sum(s["bytes"] for s in json.loads(
            (work / "big.pt.sha.json").read_text()).values())
        print(f"weights: {_gib(weight_bytes)} ({weight_bytes / 1e9:.2f} GB)", flush=True)
        for name, cmd in (
            ("export (.pt → ort)", [*cli, str(model), "--target", "ort", "-o", str(exported),
                                    "--report", str(work / "export.json"), *timing]),
            ("rewrite (.onnx → trt8.6)", [*cli, str(exported), "--target", "trt8.6", "-o",
                                          str(rewritten), "--report",
                                          str(work / "rewrite.json"), *timing]),
        ):
            print(f"{name} …", flush=True)
            step = run_step(name, cmd, work / f"{name.split()[0]}.log")
            steps.append(step)
            print(f"  exit {step.returncode}, {step.wall_s:.0f} s, peak RSS "
                  f"{_gib(step.peak_rss)} = {step.peak_rss / weight_bytes:.2f}× the weights",
                  flush=True)
            if step.returncode != 0:
                print(step.stderr[-3000:])
                return 1
        reports = [json.loads((work / f).read_text()) for f in ("export.json", "rewrite.json")]
        sums = check_checksums(work / "big.pt.sha.json", exported, rewritten)
    finally:
        if not args.keep:
            for f in work.glob("big*"):
                f.unlink()
    ok = (not sums["torch_params_missing"] and not sums["changed_by_rewrite"]
          and not sums["lost_by_rewrite"]
          and all(r["parity"]["status"] == "passed" for r in reports)
          and all(s.peak_rss < 3 * weight_bytes for s in steps))
    body = _table(args, weight_bytes, steps, reports, sums, ok)
    print(body)
    if not args.no_results:
        from benchmarks.results import write_section

        write_section("big_model_roundtrip", body)
    return 0 if ok else 1


def _table(args: argparse.Namespace, weight_bytes: int, steps: list[StepResult],
           reports: list[dict], sums: dict[str, object], ok: bool) -> str:
    lines = [f"Model: {args.layers} × (Linear({args.width}, {args.width}) + GELU), weights "
             f"{weight_bytes / 1e9:.2f} GB ({_gib(weight_bytes)}), fp32.", "",
             "| step | wall | peak RSS (wait4) | polled peak | × weights | parity | "
             "external data | GELU sites |",
             "|---|---|---|---|---|---|---|---|"]
    for step, rep in zip(steps, reports):
        par = rep["parity"]
        worst = max((o["max_abs"] for o in par.get("outputs", {}).values()), default=0.0)
        lines.append(
            f"| {step.name} | {step.wall_s:.0f} s | {_gib(step.peak_rss)} | "
            f"{_gib(step.polled_peak)} | {step.peak_rss / weight_bytes:.2f}× | "
            f"{par['status']} (max abs {worst:.2g}) | "
            f"{'yes' if rep.get('external_data') else 'no'} | {len(rep['gelu_sites'])} |")
    lines += ["", f"Checksums: {sums['torch_params_found_in_export']}/{sums['torch_params']} "
              "torch parameters byte-identical in the export "
              f"({_gib(int(sums['torch_bytes']))}, {sums['torch_params_transposed']} of them "
              "stored transposed); "
              f"{sums['identical_after_rewrite']}/{sums['export_initializers']} initializers "
              "of the export byte-identical, by name, after the rewrite; changed: "
              f"{len(sums['changed_by_rewrite'])}, lost: {len(sums['lost_by_rewrite'])}.",
              "", f"Verdict: {'PASS' if ok else 'FAIL'} (every peak below 3× the weights, "
              "parity passed, no weight changed or lost)."]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
