"""What starting the command line costs: CPU time (user + system, of the child process as the
kernel accounts it, `os.wait4`) and wall time of `export-gelu --help`, `export-gelu --version`
and, in the same run, `polygraphy --help` for scale.

    .venv/bin/python -m benchmarks.cli_startup [--repeats 15]

The three commands run in turn, round after round, so a change in the machine's load hits
them alike. Target (issue 23): each export-gelu command under 0.5 s of CPU (its median and
every round), against `polygraphy --help` measured alongside.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import Verdict, load_average

CPU_LIMIT = 0.5


def commands() -> dict[str, list[str]]:
    bin_dir = Path(sys.executable).parent
    return {"export-gelu --help": [str(bin_dir / "export-gelu"), "--help"],
            "export-gelu --version": [str(bin_dir / "export-gelu"), "--version"],
            "polygraphy --help": [str(bin_dir / "polygraphy"), "--help"]}


def run_once(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of `argv`, its output discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, wall


def measure(repeats: int) -> dict[str, list[tuple[float, float]]]:
    cmds = commands()
    for argv in cmds.values():  # warm the page cache and .pyc files
        run_once(argv)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cmds}
    for _ in range(repeats):
        for name, argv in cmds.items():
            samples[name].append(run_once(argv))
    return samples


def table(samples: dict[str, list[tuple[float, float]]]) -> str:
    base = statistics.median(c for c, _w in samples["polygraphy --help"])
    rows = ["| command | CPU s, median | CPU s, min–max | wall s, median | CPU vs polygraphy |",
            "|---|---:|---:|---:|---:|"]
    for name, runs in samples.items():
        cpu = [c for c, _w in runs]
        wall = [w for _c, w in runs]
        rows.append(f"| `{name}` | {statistics.median(cpu):.3f} | {min(cpu):.3f}–{max(cpu):.3f}"
                    f" | {statistics.median(wall):.3f} | "
                    f"{statistics.median(cpu) / base:.2f}× |")
    return "\n".join(rows)


def verdicts(samples: dict[str, list[tuple[float, float]]]) -> list[Verdict]:
    out = []
    for name in ("export-gelu --help", "export-gelu --version"):
        cpu = [c for c, _w in samples[name]]
        out.append(Verdict(f"`{name}` under {CPU_LIMIT} s of CPU", max(cpu) < CPU_LIMIT,
                           f"median {statistics.median(cpu):.3f} s, max {max(cpu):.3f} s over "
                           f"{len(cpu)} runs"))
    return out


def main(argv: list[str] | None = None) -> int:
    from benchmarks import results

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args(argv)
    load_before = load_average()
    samples = measure(args.repeats)
    checks = verdicts(samples)
    body = (f"CPU time is user + system of the child (`os.wait4`), {args.repeats} rounds of the "
            f"three commands in turn after one warm-up round; load average (1/5/15 min) at "
            f"start {load_before}, at end {load_average()}.\n\n**Targets (issue 23)**\n\n"
            + "\n".join(v.line() for v in checks) + "\n\n" + table(samples) + "\n\n"
            "`export-gelu` imports argparse, its target table (with numpy) and its error "
            "mapping to answer these; torch, onnx and onnxruntime are imported only when a "
            "command runs (tests/cli/test_cli_startup.py checks that no heavy library is "
            "imported).")
    print(body)
    results.write_section("cli_startup", body)
    return 0 if all(v.ok for v in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
