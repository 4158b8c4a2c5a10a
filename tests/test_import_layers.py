"""Lower layers never import the API layer: exporter/, passes/, runtime/ and trt_parser/ do
not import export_gelu.api, export_gelu.forms_api or export_gelu.cli (not even inside a
function), so the API can be read as the top of the flow (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "export_gelu"
API_LAYER = {"export_gelu.api", "export_gelu.forms_api", "export_gelu.cli"}


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement in `path` names (`from export_gelu import api` too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


@pytest.mark.parametrize("package",
                         ["exporter", "passes", "check", "device", "report", "trt_parser"])
def test_lower_packages_do_not_import_the_api_layer(package):
    upward = {f"{p.relative_to(PACKAGE).as_posix()} → {m}"
              for p in sorted((PACKAGE / package).rglob("*.py"))
              for m in imported_modules(p) & API_LAYER}
    assert not upward


def test_the_scan_sees_an_upward_import(tmp_path):
    """The scan itself: a function-level import of the API is found."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from export_gelu.api import export\n    return export\n")
    assert "export_gelu.api" in imported_modules(module)
