"""Every stage has a unit test: each `@stage_io` function of export_gelu/pipeline/MODULE.py is
called on a state in tests/pipeline/test_stages_MODULE.py (docs/testing.md, "Stage tests")."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import export_gelu.pipeline as pipeline
from tests.conftest import ROOT


def stage_functions() -> list[tuple[str, str]]:
    """(module, function) of every stage function the pipeline package declares."""
    found = []
    for info in pkgutil.iter_modules(pipeline.__path__):
        module = importlib.import_module(f"export_gelu.pipeline.{info.name}")
        for name, fn in vars(module).items():
            if (callable(fn) and getattr(fn, "__module__", None) == module.__name__
                    and getattr(inspect.unwrap(fn), "stage_io", None) is not None):
                found.append((info.name, name))
    return sorted(found)


def test_the_pipeline_declares_its_stages() -> None:
    found = stage_functions()
    assert ("sources", "load") in found and ("write", "save") in found
    assert len(found) >= 40


def test_every_stage_has_a_unit_test() -> None:
    missing = []
    for module, name in stage_functions():
        path = ROOT / "tests" / "pipeline" / f"test_stages_{module}.py"
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        if not re.search(rf"\b{name}\(state\b", text):
            missing.append(f"{module}.{name} (tests/pipeline/test_stages_{module}.py)")
    assert missing == [], f"stages without a unit test: {missing}"
