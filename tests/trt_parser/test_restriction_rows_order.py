"""The restriction table's order is `trt_parser/restriction_rows.py`'s: the row modules
register their rows as they are imported, so no other module of the package imports one
(before the split a fix importing a row module put its rows first or last depending on which
module was imported first)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from export_gelu.trt_parser.restrictions import RESTRICTIONS
from tests.conftest import ROOT

PACKAGE = ROOT / "export_gelu"
TRT_PARSER = PACKAGE / "trt_parser"
#: What registers a row at import time: a decorator or a call at a line's start.
_REGISTERS = re.compile(r"^\s*@?(restriction|graph_restriction|must_be_weights)\(", re.M)


def _imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def _assembled() -> list[str]:
    """The row modules `restriction_rows.py` imports, in its order."""
    tree = ast.parse((TRT_PARSER / "restriction_rows.py").read_text(encoding="utf-8"))
    return [f"{n.module}.{a.name}" for n in tree.body if isinstance(n, ast.ImportFrom)
            for a in n.names]


def test_every_row_module_is_assembled() -> None:
    registering = {f"export_gelu.trt_parser.{p.stem}" for p in TRT_PARSER.glob("*.py")
                   if _REGISTERS.search(p.read_text(encoding="utf-8"))
                   and p.stem not in ("restriction_records", "restriction_shared")}
    assert len(registering) >= 10
    assert registering == set(_assembled())


def test_no_other_module_imports_a_row_module() -> None:
    rows = set(_assembled())
    importers = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
                 if p.name != "restriction_rows.py" and _imported_modules(p) & rows}
    assert importers == set()


def test_the_table_starts_with_the_first_row_module_and_ends_with_the_last() -> None:
    assert RESTRICTIONS[0].key == "slice-axes-computed"  # restriction_rows_weights
    assert RESTRICTIONS[-1].detect.__module__ == "export_gelu.trt_parser.qdq_rows"
    assert len({r.key for r in RESTRICTIONS}) == len(RESTRICTIONS)
