"""What each test costs, in CPU seconds rather than wall: a pytest plugin (docs/testing.md,
"Measuring").

    .venv/bin/python -m pytest -p tests.costs --costs=costs.jsonl -n 2 -m fast
    .venv/bin/python -m tests.costs costs.jsonl            # the table, by tier and file

Wall times depend on what else the machine runs; CPU time much less. For every test this
records (one JSON line each; every xdist worker appends to the same file): its id, tier, the
`slow` mark, its outcome, the CPU seconds of its own process over setup, call and teardown
(all threads), those of the child processes it waited for, the seconds spent building
`session_cache` entries (counted apart: a warm cache builds none), the Python child processes
it started, and its wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

_STARTED: list[int] = [0]  # Python children started by the running test
_BUILT: list[float] = [0.0]  # CPU seconds building session_cache entries in the running test


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def _is_python(args: Any) -> bool:
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args or [])
    words = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]
    return any(os.path.basename(w).startswith("python") or w == sys.executable or
               os.path.basename(w) == "export-gelu" for w in words)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--costs", metavar="FILE.jsonl",
                     help="append each test's CPU cost to FILE.jsonl (tests/costs.py)")


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("costs"):
        return
    original = subprocess.Popen.__init__

    def counting(self: subprocess.Popen, args: Any, *rest: Any, **kw: Any) -> None:
        if _is_python(args):
            _STARTED[0] += 1
        original(self, args, *rest, **kw)

    subprocess.Popen.__init__ = counting  # type: ignore[method-assign]

    from tests import session_cache

    build = session_cache.SessionCache._entry

    def timed(self: Any, name: str, builder: Any, *, folder: bool) -> Path:
        start = sum(_cpu())
        try:
            return build(self, name, builder, folder=folder)
        finally:
            _BUILT[0] += sum(_cpu()) - start

    session_cache.SessionCache._entry = timed  # type: ignore[method-assign]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None
                            ) -> Generator[None, Any, None]:
    path = item.config.getoption("costs")
    if not path:
        yield
        return
    _STARTED[0], _BUILT[0] = 0, 0.0
    own0, kids0 = _cpu()
    wall0 = time.perf_counter()
    yield
    own1, kids1 = _cpu()
    reports = getattr(item, "_cost_outcomes", [])
    outcome = next((o for o in reports if o != "passed"), "passed")
    tier = next((m.name for m in item.iter_markers() if m.name in ("unit", "integration", "e2e")),
                "")
    row = {"id": item.nodeid, "tier": tier, "slow": item.get_closest_marker("slow") is not None,
           "outcome": outcome, "cpu": round(own1 - own0, 3), "children": round(kids1 - kids0, 3),
           "built": round(_BUILT[0], 3), "pythons": _STARTED[0],
           "wall": round(time.perf_counter() - wall0, 3)}
    with open(path, "a") as fh:  # one short line per write: whole under O_APPEND
        fh.write(json.dumps(row) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if not hasattr(item, "_cost_outcomes"):
        item._cost_outcomes = []  # type: ignore[attr-defined]
    if report.when == "call" or report.outcome != "passed":
        item._cost_outcomes.append(report.outcome)  # type: ignore[attr-defined]


def read(path: Path) -> list[dict[str, Any]]:
    """The rows of a --costs file (the last row of a test run twice)."""
    rows = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["id"]] = row
    return list(rows.values())


def cost(row: dict[str, Any], *, warm: bool = True) -> float:
    """CPU seconds of a test with its children; `warm`: without session_cache builds."""
    return row["cpu"] + row["children"] - (row["built"] if warm else 0.0)


def table(rows: list[dict[str, Any]], top: int) -> str:
    """Totals by tier and by file, and the `top` dearest tests."""
    lines = []
    by_tier: dict[str, list[float]] = defaultdict(list)
    by_file: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_tier[r["tier"] + (" slow" if r["slow"] else "")].append(cost(r))
        by_file[r["id"].split("::")[0]].append(cost(r))
    lines.append("| tier | tests | CPU s (warm cache) | built s | Python children |")
    lines.append("|---|---|---|---|---|")
    for tier in sorted(by_tier):
        sel = [r for r in rows if r["tier"] + (" slow" if r["slow"] else "") == tier]
        lines.append(f"| {tier or '-'} | {len(sel)} | {sum(by_tier[tier]):.1f} | "
                     f"{sum(r['built'] for r in sel):.1f} | {sum(r['pythons'] for r in sel)} |")
    lines.append(f"| all | {len(rows)} | {sum(cost(r) for r in rows):.1f} | "
                 f"{sum(r['built'] for r in rows):.1f} | {sum(r['pythons'] for r in rows)} |")
    lines += ["", "| file | tests | CPU s |", "|---|---|---|"]
    for file, costs in sorted(by_file.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"| {file} | {len(costs)} | {sum(costs):.1f} |")
    lines += ["", "| test | tier | CPU s | children s | Python children |", "|---|---|---|---|---|"]
    for r in sorted(rows, key=cost, reverse=True)[:top]:
        lines.append(f"| {r['id']} | {r['tier']}{' slow' if r['slow'] else ''} | "
                     f"{cost(r):.1f} | {r['children']:.1f} | {r['pythons']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description="Sum a --costs file by tier and by file.")
    ap.add_argument("costs", type=Path)
    ap.add_argument("--top", type=int, default=40, help="the dearest tests listed (40)")
    args = ap.parse_args()
    print(table(read(args.costs), args.top))


if __name__ == "__main__":
    main()
