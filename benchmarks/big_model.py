"""Big models on one machine: peak memory per stage, as a multiple of the weight bytes, at
several sizes; every weight byte checked (SHA-256) against the model it came from.

    python -m benchmarks.big_model                       # 6, 12 and 16 GB of fp32 weights
    python -m benchmarks.big_model --sizes 0.5 --no-results   # a quick dry run
    python -m benchmarks.big_model --sizes 6 --llm gemma      # plus a ~5.6 GB Gemma

For each size, a stack of Linear(8192) + GELU layers is built as an ExportedProgram (not
measured), then each stage runs the CLI in its own process, its peak RSS read from the kernel
(`wait4`'s ru_maxrss):

  (i)   ONNX input rewrite, --no-verify   `export-gelu big.trt86.onnx --target ort --no-verify`
  (ii)  the same with verify              (reference and output in ONNX Runtime)
  (iii) torch export, --no-verify         `export-gelu big.pt --target trt8.6 --no-verify`
  (iv)  the same with verify              (PyTorch reference and the output in ONNX Runtime)

The limits are the issue's: (i) 0.25, (ii) 1.3, (iii) 1.5, (iv) 1.6 × the weight bytes.
Verify runs use `--iterations 3 --warmup 1` (latency of a memory-bound 16 GB GEMV stack is
not the point). Checksums: every torch parameter must appear byte for byte (or transposed
back) among the initializers of (iii)'s and (iv)'s outputs, and every initializer of (i)'s
input must be byte-identical, under the same name, in (i)'s and (ii)'s outputs.

`--llm gemma|phi` adds a real decoder from its transformers config with random weights
(Gemma: gelu_pytorch_tanh GeGLU; Phi: gelu_new), exported for trt10 and trt8.6 with verify.
Needs free disk of about 4 × the largest size; the files are deleted as it goes.
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

#: Appended to each build script: save `ep` to `out` and the SHA-256 of every weight of
#: `model` (and of each matrix transposed, as an exporter may store it) to `out.sha.json`.
SAVE_WITH_SUMS = r'''
torch.export.save(ep, out)
sums = {}
for name, p in model.state_dict().items():
    t = p.detach().contiguous()
    entry = {"sha": hashlib.sha256(t.numpy().tobytes()).hexdigest(), "bytes": t.nbytes}
    if t.dim() == 2:
        entry["sha_t"] = hashlib.sha256(t.t().contiguous().numpy().tobytes()).hexdigest()
    sums[name] = entry
json.dump(sums, open(out + ".sha.json", "w"))
'''

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
''' + SAVE_WITH_SUMS


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
    """(name, dims, sha256, bytes) of each initializer, hashing external data 16 MiB at a time.

    Never a whole tensor in memory: this process's peak RSS is inherited by the next stage's
    ru_maxrss (the child starts as a vfork of it), so it must stay small."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    base = path.parent
    for init in model.graph.initializer:
        sha = hashlib.sha256()
        if init.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in init.external_data}
            length = left = int(info["length"])
            with (base / info["location"]).open("rb") as fh:
                fh.seek(int(info.get("offset", 0)))
                while left:
                    chunk = fh.read(min(left, 16 << 20))
                    sha.update(chunk)
                    left -= len(chunk)
        else:
            sha.update(init.raw_data)
            length = len(init.raw_data)
        yield init.name, tuple(init.dims), sha.hexdigest(), length


WIDTH = 8192
LAYER_BYTES = (WIDTH * WIDTH + WIDTH) * 4
LIMITS = {"i": 0.25, "ii": 1.3, "iii": 1.5, "iv": 1.6}
STAGES = {"i": "ONNX rewrite, no verify", "ii": "ONNX rewrite + verify",
          "iii": "torch export → trt8.6, no verify", "iv": "torch export → trt8.6 + verify"}
TIMING = ["--iterations", "3", "--warmup", "1"]

LLM_BUILD = r'''
import hashlib, json, sys, torch
kind, layers, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
if kind == "gemma":
    from transformers import GemmaConfig, GemmaModel
    cfg = GemmaConfig(vocab_size=256000, hidden_size=2048, intermediate_size=16384,
                      num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=1,
                      head_dim=256, hidden_activation="gelu_pytorch_tanh",
                      max_position_embeddings=512)
    model = GemmaModel(cfg)
else:
    from transformers import PhiConfig, PhiModel
    cfg = PhiConfig(vocab_size=51200, hidden_size=2560, intermediate_size=10240,
                    num_hidden_layers=layers, num_attention_heads=32, hidden_act="gelu_new",
                    max_position_embeddings=512)
    model = PhiModel(cfg)
model.eval()

class Hidden(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).last_hidden_state

wrapped = Hidden(model).eval()
ids = torch.randint(0, cfg.vocab_size, (1, 16))
with torch.no_grad():
    ep = torch.export.export(wrapped, (ids,))
model = wrapped
''' + SAVE_WITH_SUMS


@dataclass
class Row:
    size: str
    stage: str
    weight_bytes: int
    peak: int
    wall: float
    parity: str
    checks: str
    limit: float | None

    @property
    def ratio(self) -> float:
        return self.peak / self.weight_bytes


def _shas(path: Path) -> dict[str, tuple[str, int]]:
    return {name: (sha, n) for name, _dims, sha, n in _external_tensors(path)}


def torch_params_found(sums_json: Path, out: Path) -> str:
    """'k/n' torch weights of 64 KiB or more byte-identical (or transposed) among `out`'s
    initializers; smaller ones (norm scales) the exporter may fold, e.g. Gemma's 1 + w."""
    sums = json.loads(sums_json.read_text())
    have = {sha for sha, _n in _shas(out).values()}
    big = {n: s for n, s in sums.items() if s["bytes"] >= 64 << 10}
    found = sum(1 for s in big.values() if s["sha"] in have or s.get("sha_t") in have)
    small = len(sums) - len(big)
    return f"{found}/{len(big)} torch weights identical" + (
        f" ({small} smaller ones not compared)" if small else "")


def same_initializers(src: Path, out: Path) -> str:
    """'k/n' weights of `src` (initializers over 1 KiB; the rest are the GELU rewrite's
    scalars) byte-identical under the same name in `out`."""
    a = {k: v for k, v in _shas(src).items() if v[1] > 1024}
    b = _shas(out)
    same = sum(1 for k, v in a.items() if b.get(k, ("",))[0] == v[0])
    return f"{same}/{len(a)} weights identical"


def _parity(report: Path) -> str:
    rep = json.loads(report.read_text())
    par = rep["parity"]
    if par["status"] == "skipped":
        return "skipped"
    worst = max((o["max_abs"] for o in par.get("outputs", {}).values()), default=0.0)
    return f"{par['status']} (max abs {worst:.2g})"


def _stage(work: Path, key: str, size: str, weight_bytes: int, cmd: list[str],
           check) -> Row:
    print(f"  ({key}) {STAGES.get(key, key)} …", flush=True)
    step = run_step(key, cmd, work / f"{key}.log")
    if step.returncode != 0:
        print(step.stderr[-3000:], flush=True)
        raise SystemExit(f"stage ({key}) exited {step.returncode}")
    row = Row(size, key, weight_bytes, step.peak_rss, step.wall_s,
              _parity(work / f"{key}.json"), check(), LIMITS.get(key))
    print(f"      {row.wall:.0f} s, peak {row.peak / 1e9:.2f} GB = {row.ratio:.2f}× "
          f"(limit {row.limit}), {row.parity}, {row.checks}", flush=True)
    return row


def run_size(gb: float, work: Path, stages: set[str]) -> list[Row]:
    layers = max(1, round(gb * 1e9 / LAYER_BYTES))
    py, cli = sys.executable, [sys.executable, "-m", "export_gelu.cli"]
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    pt, onnx86 = work / "big.pt", work / "big.trt86.onnx"
    print(f"{gb:g} GB: building {layers} × Linear({WIDTH}) + GELU …", flush=True)
    build = run_step("build", [py, "-c", BUILD, str(WIDTH), str(layers), str(pt)],
                     work / "build.log")
    if build.returncode != 0:
        raise SystemExit(build.stderr[-3000:])
    sums = work / "big.pt.sha.json"
    weight_bytes = sum(s["bytes"] for s in json.loads(sums.read_text()).values())
    size = f"{weight_bytes / 1e9:.1f} GB"
    rows = []  # (iii) always runs: its output is the ONNX input of (i) and (ii)
    rows.append(_stage(work, "iii", size, weight_bytes,
                       [*cli, str(pt), "--target", "trt8.6", "-o", str(onnx86), "--no-verify",
                        "--report", str(work / "iii.json")],
                       lambda: torch_params_found(sums, onnx86)))
    for key, verify in (("i", ["--no-verify"]), ("ii", TIMING)):
        if key not in stages:
            continue
        out = work / f"big.{key}.ort.onnx"
        rows.append(_stage(work, key, size, weight_bytes,
                           [*cli, str(onnx86), "--target", "ort", "-o", str(out), *verify,
                            "--report", str(work / f"{key}.json")],
                           lambda out=out: same_initializers(onnx86, out)))
        _remove(out)
    _remove(onnx86)
    out = work / "big.iv.trt86.onnx"
    if "iv" in stages:
        rows.append(_stage(work, "iv", size, weight_bytes,
                           [*cli, str(pt), "--target", "trt8.6", "-o", str(out), *TIMING,
                            "--report", str(work / "iv.json")],
                           lambda: torch_params_found(sums, out)))
        _remove(out)
    _remove(pt)
    return rows


def run_llm(kind: str, layers: int, work: Path) -> list[Row]:
    py, cli = sys.executable, [sys.executable, "-m", "export_gelu.cli"]
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    pt = work / f"{kind}.pt"
    print(f"{kind}: building {layers} layers from its transformers config …", flush=True)
    build = run_step("build", [py, "-c", LLM_BUILD, kind, str(layers), str(pt)],
                     work / "build.log")
    if build.returncode != 0:
        raise SystemExit(build.stderr[-3000:])
    sums = work / f"{kind}.pt.sha.json"
    weight_bytes = sum(s["bytes"] for s in json.loads(sums.read_text()).values())
    rows = []
    for target in ("trt10", "trt8.6"):
        out = work / f"{kind}.{target}.onnx"
        key = f"{kind} → {target} + verify"
        rows.append(_stage(work, key, f"{weight_bytes / 1e9:.1f} GB", weight_bytes,
                           [*cli, str(pt), "--target", target, "-o", str(out), *TIMING,
                            "--report", str(work / f"{key}.json")],
                           lambda out=out: torch_params_found(sums, out)))
        _remove(out)
    _remove(pt)
    return rows


def _remove(onnx_path: Path) -> None:
    for p in (onnx_path, Path(str(onnx_path) + ".data")):
        p.unlink(missing_ok=True)


def _merged(store: Path, rows: list[Row], fresh: bool) -> list[Row]:
    """`rows` plus those of earlier invocations (same size and stage: the new one wins),
    saved back to `store`; sorted by stage kind, then size."""
    old = [] if fresh or not store.exists() else [Row(**r) for r in json.loads(
        store.read_text())]
    new_keys = {(r.size, r.stage) for r in rows}
    merged = [r for r in old if (r.size, r.stage) not in new_keys] + rows
    order = {k: i for i, k in enumerate(("i", "ii", "iii", "iv"))}
    merged.sort(key=lambda r: (order.get(r.stage, 9), r.stage, r.weight_bytes))
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps([r.__dict__ for r in merged], indent=1))
    return merged


def slopes(rows: list[Row]) -> dict[str, float]:
    """Least-squares slope of peak RSS over weight bytes, per stage (needs ≥ 2 sizes)."""
    out = {}
    for key in LIMITS:
        pts = [(r.weight_bytes, r.peak) for r in rows if r.stage == key]
        if len(pts) < 2:
            continue
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        var = sum((x - mx) ** 2 for x, _ in pts)
        out[key] = sum((x - mx) * (y - my) for x, y in pts) / var if var else 0.0
    return out


def table(rows: list[Row]) -> str:
    lines = ["Each stage is the CLI in its own process, measured alone (wait4's ru_maxrss); rows "
             "come from WORKDIR/rows.json, where each invocation stores what it measured, so "
             "sizes can be measured one at a time. Verify stages: `--iterations 3 --warmup 1`; "
             "the reference ran first and was freed (one model in memory at a time) wherever "
             "both did not fit in half the free memory, which was every row here.", "",
             "| weights | stage | peak RSS | × weights | limit | wall | s/GB | parity | "
             "weights checked |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        limit = f"≤ {r.limit}" if r.limit is not None else ""
        mark = "" if r.limit is None or r.ratio <= r.limit else " ✗"
        label = f"({r.stage}) {STAGES[r.stage]}" if r.stage in LIMITS else r.stage
        lines.append(f"| {r.size} | {label} | {r.peak / 1e9:.2f} GB | "
                     f"{r.ratio:.2f}×{mark} | {limit} | {r.wall:.0f} s | "
                     f"{r.wall / (r.weight_bytes / 1e9):.1f} | {r.parity} | {r.checks} |")
    slope = slopes(rows)
    if slope:
        lines += ["", "Growth with size (least-squares slope of peak RSS over weight bytes, "
                  "i.e. extra bytes held per weight byte):", ""]
        lines += [f"- ({k}) {STAGES[k]}: slope {v:.3f} (limit {LIMITS[k]})"
                  for k, v in slope.items()]
    return "\n".join(lines)


def verdict(rows: list[Row]) -> bool:
    ok = all(r.limit is None or r.ratio <= r.limit for r in rows)
    ok &= all(r.parity.startswith(("passed", "skipped")) for r in rows)
    ok &= all(a == b for r in rows for a, b in [r.checks.split()[0].split("/")])
    return ok and all(v <= LIMITS[k] for k, v in slopes(rows).items())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="6,12,16", help="GB of fp32 weights, comma-separated")
    p.add_argument("--llm", choices=("gemma", "phi"), default=None)
    p.add_argument("--llm-layers", type=int, default=8)
    p.add_argument("--workdir", type=Path, default=ROOT / "build" / "big_model")
    p.add_argument("--no-results", action="store_true", help="do not write RESULTS.md")
    p.add_argument("--stages", default="i,ii,iii,iv",
                   help="which stages to measure (iii always runs: it makes the ONNX input)")
    p.add_argument("--fresh", action="store_true",
                   help="forget rows measured by earlier invocations (kept in WORKDIR/rows.json "
                        "so sizes can be measured one at a time, on a quiet machine)")
    args = p.parse_args(argv)
    store = args.workdir / "rows.json"
    rows = _merged(store, [], args.fresh)
    if args.llm:  # each size's rows are stored as soon as they are measured
        rows = _merged(store, run_llm(args.llm, args.llm_layers, args.workdir / args.llm),
                       False)
    for gb in (float(s) for s in args.sizes.split(",") if s):
        rows = _merged(store, run_size(gb, args.workdir / f"{gb:g}GB",
                                       set(args.stages.split(","))), False)
    ok = verdict(rows)
    body = table(rows) + f"\n\nVerdict: {'PASS' if ok else 'FAIL'}."
    print(body)
    if not args.no_results:
        from benchmarks.results import write_section

        write_section("big_model", body)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

