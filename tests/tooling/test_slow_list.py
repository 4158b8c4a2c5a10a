"""The measured slow list: how it is chosen, read, and that it names tests that exist."""

from __future__ import annotations

import re
from pathlib import Path

from tests.slow_list import LIST, ROOT, choose_slow, durations, listed


def test_the_slowest_go_first_and_each_file_keeps_its_quickest():
    times = {"tests/test_a.py::x": 50.0, "tests/test_a.py::y": 1.0,
             "tests/test_b.py::z": 40.0, "tests/test_c.py::w[1]": 30.0,
             "tests/test_c.py::w[2]": 2.0}
    # 123 s in all: x (50) then w[1] (30) go; z stays as test_b's only (quickest) test
    assert choose_slow(times, budget=45.0) == ["tests/test_a.py::x", "tests/test_c.py::w[1]"]
    assert choose_slow(times, budget=200.0) == []
    assert choose_slow(times, budget=0.0) == ["tests/test_a.py::x", "tests/test_c.py::w[1]"]


def test_junit_names_become_pytest_node_ids(tmp_path: Path):
    xml = tmp_path / "t.xml"
    xml.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.tooling.test_slow_list" name="test_a[x-1]" time="2.5"/>'
        '<testcase classname="tests.tooling.test_slow_list.TestThing" name="test_b" time="0.5"/>'
        '<testcase classname="tests.tooling.test_slow_list" name="test_c" time="9">'
        '<skipped message="no GPU"/></testcase>'
        '</testsuite></testsuites>')
    assert durations(xml) == {"tests/tooling/test_slow_list.py::test_a[x-1]": 2.5,
                              "tests/tooling/test_slow_list.py::TestThing::test_b": 0.5}


def test_the_list_reads_ids_and_skips_comments(tmp_path: Path):
    path = tmp_path / "slow.txt"
    path.write_text("# measured\ntests/test_a.py::x  # 50 s\n\ntests/test_b.py::y[1]\n")
    assert listed(path) == {"tests/test_a.py::x", "tests/test_b.py::y[1]"}
    assert listed(tmp_path / "missing.txt") == frozenset()


def test_every_listed_test_is_defined_where_the_list_says():
    missing = []
    for test in sorted(listed(LIST)):
        file, *rest = test.split("::")
        name = re.sub(r"\[.*\]$", "", rest[-1])
        path = ROOT / file
        if not path.is_file() or not re.search(rf"def {re.escape(name)}\b", path.read_text()):
            missing.append(test)
    assert not missing, f"tests/slow_tests.txt names tests that no longer exist: {missing[:5]}"
