"""Which tests `make test-fast` leaves out: the measured slow list.

`tests/slow_tests.txt` lists test ids (one per line, `#` comments allowed) that conftest marks
`slow` at collection, beside the `@pytest.mark.slow` marks written in the test files. The
list is made from a measured run, not by hand:

    EXPORT_GELU_SLOW_LIST=off .venv/bin/python -m pytest -n auto -m "not slow" \
        --junitxml=/tmp/t.xml
    .venv/bin/python -m tests.slow_list /tmp/t.xml --budget 190

takes the slowest tests out of the quick lane until what stays sums to at most `--budget`
seconds (of one worker's time), keeping each file's quickest test in it so that every test
file still runs something. The whole suite (`make test`, CI) runs every test either way.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path

LIST = Path(__file__).with_name("slow_tests.txt")
ROOT = LIST.parent.parent


def listed(path: Path = LIST) -> frozenset[str]:
    """The test ids in the slow list (none when it is missing)."""
    if not path.is_file():
        return frozenset()
    lines = (ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines())
    return frozenset(ln for ln in lines if ln)


def durations(junit: Path) -> dict[str, float]:
    """Test id → seconds, from pytest's JUnit XML (`classname` tests.cli.test_x →
    tests/cli/test_x.py)."""
    out: dict[str, float] = {}
    for case in ET.parse(junit).iter("testcase"):
        if case.find("skipped") is not None:
            continue
        parts = case.get("classname", "").split(".")
        cut = next(i for i in range(len(parts), 0, -1)
                   if (ROOT / "/".join(parts[:i])).with_suffix(".py").is_file())
        test = "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], case.get("name", "")])
        out[test] = float(case.get("time", 0))
    return out


def choose_slow(times: dict[str, float], budget: float) -> list[str]:
    """The slowest tests until the rest sum to at most `budget`; each file's quickest stays."""
    quickest: dict[str, str] = {}
    for test, t in times.items():
        file = test.split("::")[0]
        if file not in quickest or t < times[quickest[file]]:
            quickest[file] = test
    keep = set(quickest.values())
    total = sum(times.values())
    slow = []
    for test in sorted(times, key=times.get, reverse=True):
        if total <= budget:
            break
        if test in keep:
            continue
        slow.append(test)
        total -= times[test]
    return sorted(slow)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("junit", type=Path, help="pytest --junitxml of a `-m 'not slow'` run")
    ap.add_argument("--budget", type=float, default=190.0,
                    help="seconds of test time the quick lane may keep (default 190)")
    args = ap.parse_args()
    times = durations(args.junit)
    slow = choose_slow(times, args.budget)
    kept = sum(t for k, t in times.items() if k not in set(slow))
    head = ["# Measured slow: left out of `make test-fast` (tests/slow_list.py says how this",
            f"# list is made). {len(slow)} of {len(times)} tests; the rest sum to "
            f"{kept:.0f} s of test time."]
    LIST.write_text("\n".join(head + slow) + "\n")
    print(f"{len(slow)} tests listed slow in {LIST}; the quick lane keeps {kept:.0f} s")


if __name__ == "__main__":
    main()
