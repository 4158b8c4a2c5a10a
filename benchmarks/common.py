"""What the latency scripts share: their command line, one side-by-side comparison with its
table and op notes, verdicts against the issue's targets, and the conditions of the run."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.graphs import op_summary, session_op_summary
from benchmarks.harness import Comparison, compare_onnx, format_table, pool


@dataclass
class Variant:
    """One file in a comparison: its label, its path (None when it could not be made) and a
    note on how it was made, or why it is missing."""

    label: str
    path: Path | None
    note: str = ""


@dataclass
class Verdict:
    """One "must show" line: the claim, whether this run met it, and the numbers."""

    claim: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"- **{'met' if self.ok else 'NOT met'}**: {self.claim} — {self.detail}"


def ratio_text(ratio: float, lo: float, hi: float) -> str:
    return f"{ratio:.3f}× [{lo:.3f}, {hi:.3f}]"


def _each_run(comp: Comparison, label: str, baseline: str) -> tuple[list[float], str]:
    """Each fresh run's median ratio, and a text listing them (empty for a single run)."""
    medians = [run.paired(label, baseline)[0] for run in comp.runs]
    text = f"; each fresh run: {' / '.join(f'{m:.3f}' for m in medians)}" if medians else ""
    return medians, text


def at_most(claim: str, comp: Comparison, label: str, baseline: str, limit: float) -> Verdict:
    """Met when the whole pooled 95% interval of time(label)/time(baseline) is ≤ `limit`, and
    every fresh run's median ratio too."""
    r, lo, hi = comp.paired(label, baseline)
    each, text = _each_run(comp, label, baseline)
    return Verdict(claim, hi <= limit and all(m <= limit for m in each),
                   f"{label} / {baseline}: {ratio_text(r, lo, hi)}{text}, target ≤ {limit:g}")


def faster_by(claim: str, comp: Comparison, label: str, baseline: str,
              gain: float) -> Verdict:
    """Met when the pooled median ratio is ≤ 1 − gain with its interval below 1, and every
    fresh run's median ratio is ≤ 1 − gain too."""
    r, lo, hi = comp.paired(label, baseline)
    each, text = _each_run(comp, label, baseline)
    return Verdict(claim, r <= 1.0 - gain and hi < 1.0 and all(m <= 1.0 - gain for m in each),
                   f"{label} / {baseline}: {ratio_text(r, lo, hi)}{text}, target ≤ "
                   f"{1 - gain:g} with the interval below 1")


def load_average() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=None,
                   help="timed rounds per comparison (default: each case's own)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    p.add_argument("--runs", type=int, default=3,
                   help="fresh runs per comparison (new sessions each), pooled; the tables "
                        "show each run's ratio, and a target is met only if every run meets it")
    p.add_argument("--replicas", type=int, default=3,
                   help="sessions per graph, rotated round by round (averages out where one "
                        "session's buffers landed)")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: 8 rounds, 2 warm-up; implies --no-write")
    p.add_argument("--no-write", action="store_true",
                   help="print only; leave benchmarks/RESULTS.md alone")


def rounds_for(args: argparse.Namespace, default: int) -> tuple[int, int]:
    """(rounds per run, warmup) for one case under the command line's settings."""
    if args.quick:
        args.runs = 1
        return 8, 2
    return (args.rounds or default), args.warmup


def compare_variants(title: str, variants: Sequence[Variant], feed: dict[str, np.ndarray],
                     rounds: int, warmup: int, threads: int = 1, atol: float = 1e-4,
                     providers: Sequence[str] | None = None, replicas: int = 1,
                     runs: int = 1) -> tuple[Comparison, str]:
    """Time the variants that exist; returns the comparison and its Markdown (table + ops).

    `runs` > 1 repeats the whole comparison with fresh sessions and pools the rounds
    (`harness.pool`); the table then also shows each run's ratio.
    """
    present = [v for v in variants if v.path is not None]
    print(f"\n{title}: {len(present)} graphs, {runs} × {rounds} rounds", flush=True)
    comp = pool([compare_onnx([v.path for v in present], feed,  # type: ignore[misc]
                              [v.label for v in present], rounds=rounds, warmup=warmup,
                              threads=threads, atol=atol, providers=providers,
                              replicas=replicas, seed=i)
                 for i in range(max(1, runs))])
    lines = [format_table(title, comp), "Graphs (in the file → what ONNX Runtime runs after its "
             "own optimizer):", ""]
    for v in variants:
        if v.path is None:
            lines.append(f"- {v.label}: skipped: {v.note}")
            continue
        note = f" ({v.note})" if v.note else ""
        lines.append(f"- {v.label}{note}: {op_summary(v.path)} → "
                     f"{session_op_summary(v.path, list(providers) if providers else None)}")
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    return comp, text


def conditions(threads: int, rounds_note: str, load_before: str, replicas: int = 1) -> str:
    """The paragraph that says how the tables were measured."""
    sessions = (f"{replicas} sessions per graph, each with its own copy of the inputs, used in "
                "turn round by round; " if replicas > 1 else "")
    return (f"ONNX Runtime CPU EP, {threads} intra-op thread(s), spinning off; {sessions}every "
            f"graph in a table is timed in the same run, interleaved in rotating order "
            f"({rounds_note}); "
            "ratio = median over rounds of time(graph) / time(first graph) in the same round, "
            "with a bootstrap 95% interval. Outputs are checked against the first graph before "
            f"timing. Load average (1/5/15 min) at start {load_before}, at end "
            f"{load_average()}.\n")


def section_body(args: argparse.Namespace, rounds_used: set[int], load_before: str,
                 checks: Sequence[Verdict], sections: Sequence[str]) -> str:
    """A latency script's RESULTS.md section: conditions, the targets' verdicts, the tables."""
    warm = 2 if args.quick else args.warmup
    note = (f"{args.runs} fresh run(s) of {'/'.join(map(str, sorted(rounds_used)))} rounds "
            f"each, after {warm} warm-up runs per session, pooled")
    return (conditions(args.threads, note, load_before, args.replicas)
            + "\n**Targets (issue 7)**\n\n" + "\n".join(v.line() for v in checks) + "\n\n"
            + "\n".join(sections))


def finish_section(name: str, args: argparse.Namespace, rounds_used: set[int], load_before: str,
                   checks: Sequence[Verdict], sections: Sequence[str]) -> int:
    """Print the verdicts, write RESULTS.md section `name` (unless --quick/--no-write), and
    return the script's exit status: 0 when every target is met, else 1."""
    print("\n".join(v.line() for v in checks))
    body = section_body(args, rounds_used, load_before, checks, sections)
    if not (args.quick or args.no_write):
        from benchmarks.results import write_section

        write_section(name, body)
    return 0 if all(v.ok for v in checks) else 1
