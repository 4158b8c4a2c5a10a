"""Do repeated latency measurements of the same graph agree within the spread the harness
reports? (A benchmark, not a test: run it on the machine you care about.)

    .venv/bin/python -m benchmarks.latency_repeatability [--example bert] [--iterations 200]

One ONNX graph is exported from an example model, then timed with the harness
(`export_gelu.check.latency.measure_latency`, the code behind verify and --compare-forms):

A. in one interleaved run, SESSIONS separate ONNX Runtime sessions of the *same* file: the
   harness must not tell them apart (their medians' 95% intervals should overlap);
B. REPEATS runs one after another on one session: each repeat's median should fall inside
   the other repeats' 95% intervals of the median, and inside the first repeat's p25–p75.

It prints every median with its interval and how many pairs agree.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np


def _graph(example: str, tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    from examples.save_model import save
    from export_gelu import export
    from export_gelu.check.inputs.input_resolver import InputRequest, resolve_inputs
    from export_gelu.exporter.loading.load import load_model

    model = save(example, "exported", tmp / f"{example}.pt")
    out = tmp / f"{example}.onnx"
    export(model, target="onnx", output=out, verify=False)
    return out, dict(resolve_inputs(load_model(model), InputRequest()).feed)  # its examples


def _row(name: str, lat) -> str:  # noqa: ANN001 - a Latency
    lo, hi = lat.median_ci_ms
    half = 50.0 * (hi - lo) / lat.median_ms
    return (f"  {name:<11} median {lat.median_ms:7.4f} ms   95% CI {lo:7.4f}–{hi:7.4f} "
            f"(±{half:3.1f}%)   reported spread ±{lat.spread_pct:3.1f}%"
            f"{' (drift)' if lat.drifted else '        '}   "
            f"p25–p75 {lat.p25_ms:7.4f}–{lat.p75_ms:7.4f}   p90 {lat.p90_ms:7.4f}")


def _ci_overlap(a, b) -> bool:  # noqa: ANN001 - Latency
    return a.median_ci_ms[0] <= b.median_ci_ms[1] and b.median_ci_ms[0] <= a.median_ci_ms[1]


def _pairs_agree(lats: list) -> tuple[int, int, int, float]:
    """(pairs within the reported spread, pairs within the bare 95% CI, pairs, largest gap)."""
    pairs = list(itertools.combinations(lats, 2))
    agree = sum(a.overlaps(b) for a, b in pairs)
    agree_ci = sum(_ci_overlap(a, b) for a, b in pairs)
    meds = [lat.median_ms for lat in lats]
    return agree, agree_ci, len(pairs), (max(meds) - min(meds)) / min(meds)


def main(argv: list[str] | None = None) -> int:
    from export_gelu.check.latency import measure_latency
    from export_gelu.check.runners.ort_runner import ort_runner

    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--example", default="bert", choices=("bert", "gpt2", "vit", "lstm"))
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--sessions", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="latency-repeat-") as tmp:
        path, feed = _graph(args.example, Path(tmp))
        print(f"graph: {args.example} exported for target onnx; ONNX Runtime CPU EP, "
              f"{args.threads} thread(s), {args.iterations} timed runs after {args.warmup} "
              "warm-up per measurement")

        runners = [ort_runner(path, threads=args.threads, name=f"session {i + 1}")
                   for i in range(args.sessions)]
        for r in runners:
            r.activate()
        a = measure_latency(runners, feed, args.iterations, args.warmup)
        for r in runners:
            r.deactivate()
        print(f"\nA. {args.sessions} sessions of the same file, one interleaved run")
        for name, lat in a.items():
            print(_row(name, lat))
        agree, agree_ci, total, gap = _pairs_agree(list(a.values()))
        print(f"  within the reported spread: {agree} of {total} pairs; within the bare 95% CI: "
              f"{agree_ci} of {total}; largest gap between medians {gap:.1%}")

        runner = ort_runner(path, threads=args.threads, name="session")
        runner.activate()
        b = [measure_latency([runner], feed, args.iterations, args.warmup)["session"]
             for _ in range(args.repeats)]
        runner.deactivate()
        print(f"\nB. {args.repeats} measurements in a row, one session")
        for i, lat in enumerate(b):
            print(_row(f"repeat {i + 1}", lat))
        agree_b, agree_ci_b, total_b, gap_b = _pairs_agree(b)
        inside_iqr = sum(b[0].p25_ms <= lat.median_ms <= b[0].p75_ms for lat in b[1:])
        print(f"  within the reported spread: {agree_b} of {total_b} pairs; within the bare 95% "
              f"CI: {agree_ci_b} of {total_b}; largest gap between medians {gap_b:.1%}; "
              f"{inside_iqr} of {len(b) - 1} later medians inside repeat 1's p25–p75")
        ok = agree == total and agree_b == total_b
        print(f"\nverdict: repeated measurements of one graph {'agree' if ok else 'do NOT agree'}"
              f" within the spread the harness reports ({agree + agree_b} of {total + total_b} "
              f"pairs; the bare 95% CI alone: {agree_ci + agree_ci_b} of {total + total_b})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
