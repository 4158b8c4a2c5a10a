"""Every step has a unit test: each public function of export_gelu/steps/MODULE.py is called
with its arguments in tests/steps/test_MODULE.py (docs/testing.md, "Step tests")."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import export_gelu.steps as steps
from tests.conftest import ROOT


def step_functions() -> list[tuple[str, str]]:
    """(module, function) of every public function the steps package defines."""
    found = []
    for info in pkgutil.iter_modules(steps.__path__):
        module = importlib.import_module(f"export_gelu.steps.{info.name}")
        for name, fn in vars(module).items():
            if (inspect.isfunction(fn) and fn.__module__ == module.__name__
                    and not name.startswith("_")):
                found.append((info.name, name))
    return sorted(found)


def test_the_steps_are_functions() -> None:
    found = step_functions()
    assert ("load", "load") in found and ("graph", "make_graph") in found
    assert len(found) >= 40


def test_every_step_has_a_unit_test() -> None:
    missing = []
    for module, name in step_functions():
        path = ROOT / "tests" / "steps" / f"test_{module}.py"
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        if not re.search(rf"\b{name}\(", text):
            missing.append(f"{module}.{name} (tests/steps/test_{module}.py)")
    assert missing == [], f"steps without a unit test: {missing}"
