"""The test harness itself: the tests' timing default (tests/cli_runs.py), the tiers read from
what a test uses (tests/tiers.py) and the cost table (tests/costs.py)."""

from __future__ import annotations

import dis
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from examples.save_model import save as _save_example
from tests import cli_runs, tiers
from tests.cli_runs import TEST_TIMING, with_test_timing
from tests.costs import read, table
from tests.golden_runs import scenario_name

TIMING = [w for pair in TEST_TIMING.items() for w in pair]


@pytest.mark.parametrize("argv, expected", [
    (["m.pt", "-o", "m.onnx"], [*TIMING, "m.pt", "-o", "m.onnx"]),
    (["verify", "m.pt", "d.onnx"], ["verify", *TIMING, "m.pt", "d.onnx"]),
    (["inspect", "m.onnx"], ["inspect", "m.onnx"]),
    (["m.pt", "--iterations", "7"], ["m.pt", "--iterations", "7"]),
    (["m.pt", "--iterations=7"], ["m.pt", "--iterations=7"]),
    (["verify", "m.pt", "d.onnx", "--warmup", "2"], ["verify", "m.pt", "d.onnx", "--warmup", "2"]),
    (["--help"], ["--help"]),
    (["m.pt", "--version"], ["m.pt", "--version"]),
    (["m.pt", "--", "-odd.onnx"], ["m.pt", "--", "-odd.onnx"]),
    ([], []),
])
def test_a_run_times_once_unless_the_test_asks(argv, expected):
    assert with_test_timing(argv) == expected


def test_arguments_keep_their_type():
    argv = [b"out\xff.pt", Path("x.onnx")]
    assert with_test_timing(argv) == [*TIMING, b"out\xff.pt", Path("x.onnx")]


def test_api_calls_get_the_timing_unless_they_give_theirs():
    seen = []

    def api(model, **kwargs):
        seen.append(kwargs)

    timed = cli_runs._with_test_timing_keywords(api)
    timed("m", target="onnx")
    timed("m", iterations=5)
    timed("m", warmup=0)
    timed("m", options=object())
    assert seen[0] == {"target": "onnx", "iterations": 1, "warmup": 0}
    assert seen[1] == {"iterations": 5} and seen[2] == {"warmup": 0}
    assert list(seen[3]) == ["options"]
    assert timed.__wrapped__ is api


def test_the_installed_api_is_wrapped_once():
    import export_gelu
    from export_gelu import api

    cli_runs.time_api_calls_once()  # a second time: no wrapper around the wrapper
    for name in ("export", "verify", "compare_forms"):
        func = getattr(api, name)
        assert func.__test_timing__ and not getattr(func.__wrapped__, "__test_timing__", False)
        assert getattr(export_gelu, name) is func


def test_run_cli_restores_the_environment_and_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPORT_GELU_TEST_PROBE", "before")
    here = Path.cwd()
    res = cli_runs.run_cli("--version", env={"EXPORT_GELU_TEST_PROBE": None}, cwd=tmp_path)
    assert res.code == 0 and res.out.startswith("export-gelu ")
    assert res.returncode == res.code and res.stdout == res.out and res.stderr == res.err
    assert Path.cwd() == here
    import os

    assert os.environ["EXPORT_GELU_TEST_PROBE"] == "before"


# -- tiers: what a test uses, read from its code ---------------------------------------------


def _starts_python():
    return subprocess.run([sys.executable, "-c", "pass"], check=True)


def _starts_git():
    return subprocess.run(["git", "--version"], capture_output=True)


def _helper_runs_the_cli(path):
    return cli_runs.run_cli(path)


def _calls_a_helper():
    return _helper_runs_the_cli("m.pt")


def _imports_the_api_inside():
    from export_gelu import export

    return export


def _uses_the_api_by_attribute():
    import export_gelu

    return export_gelu.verify


def _builds_an_example():
    from examples.models import build

    return build("bert")


def _builds_an_example_imported_above():
    return _save_example("bert", "exported", "m.pt")  # export_gelu.examples.save_model's


def _exports_a_module():
    import torch

    return torch.onnx.export


def _pure():
    return sorted([3, 1, 2])


@pytest.mark.parametrize("func, expected", [  # by name: a function as a parameter is followed
    ("_starts_python", {"process", "python"}),
    ("_starts_git", {"process"}),
    ("_calls_a_helper", {"run"}),
    ("_imports_the_api_inside", {"run"}),
    ("_uses_the_api_by_attribute", {"run"}),
    ("_builds_an_example", {"model"}),
    ("_builds_an_example_imported_above", {"model"}),
    ("_exports_a_module", {"export"}),
    ("_pure", set()),
])
def test_what_a_test_uses_is_read_from_its_code(func, expected):
    assert tiers.uses_of([globals()[func]]) == expected


def _read_by_dis(code: types.CodeType) -> list[tuple[str | None, str | None]]:
    return [(i.opname, str(i.argval)) if i.opname in tiers._READ else (None, None)
            for i in dis.get_instructions(code) if i.opname != "EXTENDED_ARG"]


def test_the_instruction_reader_reads_what_dis_reads():
    """tiers.instructions reads code objects' bytes itself (dis is ten times slower): on this
    Python, it must name what dis names, here on the harness's modules and on a function with
    more names than one byte can index (EXTENDED_ARG)."""
    many = ", ".join(f"n{i}" for i in range(300))
    source = f"def f(x):\n    import os\n    y = ({many})\n    return os.path.join(y, x)\n"
    codes = [compile(source, "<many>", "exec")]
    for module in (tiers, cli_runs, sys.modules[__name__]):
        path = Path(module.__file__)
        codes.append(compile(path.read_text(), str(path), "exec"))
    read = 0
    for top in codes:
        for code in tiers._codes(top):
            assert list(tiers.instructions(code)) == _read_by_dis(code), code.co_name
            read += 1
    assert read > 50


def test_tiers_are_marked_at_collection(request):
    """This test runs nothing: unit; every collected test has exactly one tier."""
    marks = [m.name for m in request.node.iter_markers() if m.name in tiers.TIERS]
    assert marks == ["unit"]


# -- costs and golden runs -------------------------------------------------------------------


def test_the_cost_table_sums_by_tier_without_cache_builds(tmp_path):
    rows = [{"id": "tests/a/test_x.py::t1", "tier": "unit", "slow": False, "outcome": "passed",
             "cpu": 1.0, "children": 0.0, "built": 0.0, "pythons": 0, "wall": 1.0},
            {"id": "tests/a/test_x.py::t2", "tier": "e2e", "slow": False, "outcome": "passed",
             "cpu": 5.0, "children": 4.0, "built": 3.0, "pythons": 1, "wall": 9.0}]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + rows[:1]))
    got = read(path)
    assert len(got) == 2
    text = table(got, top=5)
    assert "| e2e | 1 | 6.0 | 3.0 | 1 |" in text and "| all | 2 | 7.0 | 3.0 | 1 |" in text


def test_a_golden_scenario_is_named_by_its_flags():
    a = scenario_name("bert", "exported", ("--target", "onnx"))
    assert a == scenario_name("bert", "exported", ("--target", "onnx"))
    assert a != scenario_name("bert", "exported", ("--target", "onnx", "--no-verify"))
    assert a.startswith("golden-bert-exported-")


# -- torch's ONNX registry built once per process (tests/torchlib_once.py) -------------------


def test_the_kept_registry_is_a_copy_of_what_torch_builds():
    """The tests' processes keep torch's ATen-to-ONNX registry (conftest): each export gets a
    copy holding what a fresh build holds, and what one export registers stays its own."""
    registration = pytest.importorskip("torch.onnx._internal.exporter._registration")
    from tests.torchlib_once import MODULE

    registry = registration.ONNXRegistry
    build = registry.from_torchlib
    assert registration.__name__ == MODULE and getattr(build.__func__, "__kept__", False)

    def described(reg):
        return {target: [(m.fx_target, m.onnx_function, m.is_custom, m.is_complex)
                         for m in metas] for target, metas in reg.functions.items()}

    first, second = build(), build()
    fresh = build.__wrapped__(registry)
    assert first.opset_version == fresh.opset_version
    assert described(first) == described(second) == described(fresh)
    assert len(first.functions) > 100
    target = next(iter(first.functions))
    assert first.functions[target] is not second.functions[target]
    first.functions[target].append("registered by one export")
    assert described(build()) == described(fresh)
