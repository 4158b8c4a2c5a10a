"""Lower layers never import the API layer: exporter/, passes/, check/, device/, report/ and
trt_parser/ do not import export_gelu.api, export_gelu.cli or export_gelu.cli_docs (not even
inside a function), so the API can be read as the top of the flow (docs/architecture.md).
trt_parser/ (data) and graph/ (the base layer) import no behaviour, and no module of graph/,
passes/ or trt_parser/ imports itself back through others."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "export_gelu"
API_LAYER = {"export_gelu.api", "export_gelu.cli", "export_gelu.cli_docs"}


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


def _module_names() -> dict[str, Path]:
    """Dotted name → file of every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules `path` imports: `from pkg import sub` names the module `pkg.sub` where it
    is one, else `pkg` (as grimp reads it)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in modules else node.module)
    return found


def test_trt_parser_and_the_graph_import_no_behaviour():
    """trt_parser/ is data about TensorRT and graph/ is the base layer: neither imports a
    pass, a runner, the exporter or the check (their detectors take the one graph)."""
    behaviour = ("export_gelu.passes", "export_gelu.exporter", "export_gelu.compat",
                 "export_gelu.check.inspection", "export_gelu.device", "export_gelu.report")
    upward = {f"{p.relative_to(PACKAGE).as_posix()} → {m}"
              for package in ("trt_parser", "graph")
              for p in sorted((PACKAGE / package).rglob("*.py"))
              for m in imported_modules(p) if m.startswith(behaviour)}
    assert not upward
    graph_imports = {m for p in (PACKAGE / "graph").rglob("*.py") for m in imported_modules(p)
                     if m.startswith("export_gelu.") and not m.startswith("export_gelu.graph")}
    assert graph_imports <= {"export_gelu.onnx_weights", "export_gelu.onnx_weights.is_external",
                             "export_gelu.onnx_weights.is_lazy",
                             "export_gelu.onnx_weights.tensor_array"}


def test_no_import_circle_among_the_graph_the_passes_and_trt_parser():
    """Module-level and function-level imports alike: no module of graph/, passes/ or
    trt_parser/ reaches itself again (the restriction records and the fix registry are
    modules of their own for this)."""
    modules = _module_names()
    scope = [m for m in modules if m.startswith(("export_gelu.graph", "export_gelu.passes",
                                                 "export_gelu.trt_parser"))]
    edges = {m: {i for i in _imports(modules[m], modules) if i != m and i in scope}
             for m in scope}
    circles = []
    for start in scope:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    circles.append(" → ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert not circles, circles[:3]
