"""The code's shape: commands are functions calling steps with their arguments (no function
takes more than six positional parameters, api.export stays short, no module reads the
package's own source), and tolerances are decided in one place."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

PACKAGE = ROOT / "export_gelu"


def _functions():
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(PACKAGE).as_posix(), node


def test_no_function_takes_more_than_six_positional_parameters():
    over = []
    for where, fn in _functions():
        positional = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)
                      if a.arg not in ("self", "cls")]
        if len(positional) > 6:
            over.append(f"{where}:{fn.name} ({len(positional)})")
    assert not over


def test_api_export_stays_short():
    tree = ast.parse((PACKAGE / "api.py").read_text(encoding="utf-8"))
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "export"]
    assert fn.end_lineno - fn.lineno + 1 <= 60


def test_tolerances_are_decided_in_one_place():
    users = {where for where, fn in _functions()
             for node in ast.walk(fn) if isinstance(node, ast.Name)
             and node.id in ("DEFAULT_TOLERANCES", "FORM_ERROR_HEADROOM", "REWRITE_SHARE")}
    assert users == {"tolerances.py"}


def test_no_module_reads_the_packages_own_source():
    """The package does not analyse itself (the stage analyser went with the stages): no
    module asks `inspect` for source code or globs the package's `.py` files."""
    readers = {where for where, fn in _functions() for node in ast.walk(fn)
               if (isinstance(node, ast.Attribute)
                   and node.attr in ("getsource", "getsourcelines", "getsourcefile"))
               or (isinstance(node, ast.Constant) and node.value == "*.py")}
    assert readers == set()


def test_no_shared_stage_state():
    """No `need()` of a shared record, no stage declarations: steps take arguments."""
    text = {p.relative_to(PACKAGE).as_posix(): p.read_text(encoding="utf-8")
            for p in PACKAGE.rglob("*.py")}
    assert not [w for w, t in text.items() if "need(" in t or "stage_io" in t
                or "RunState" in t]
    assert not (PACKAGE / "pipeline").exists()


def test_the_architecture_pages_excerpts_are_the_code():
    """Each code block docs/architecture.md marks `<!-- excerpt: PATH -->` is PATH's code, line
    by line in order (`...` stands for lines left out), so the page shows the flows as they
    are."""
    import re

    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- excerpt: (\S+) -->\n```\n(.*?)```", page, re.S)
    assert len(blocks) >= 3
    for path, block in blocks:
        code = [ln.rstrip() for ln in (ROOT / path).read_text(encoding="utf-8").splitlines()]
        at = 0
        for line in block.splitlines():
            if line.strip() in ("", "..."):
                continue
            assert line.rstrip() in code[at:], f"{path}: {line.strip()!r} not there, in order"
            at = code.index(line.rstrip(), at) + 1
