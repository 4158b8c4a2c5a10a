"""What each stage reads from and writes to the run's state, read from its code.

Every `Stage` declares the `RunState` fields it reads and writes (pipeline/commands.py,
export_command.py, inspect_command.py); `stage_accesses(fn)` finds them in the function's
source and in every export-gelu function it hands the state to, so a test holds each
declaration to the code (tests/pipeline/test_stage_dataflow.py) and docs/architecture.md's stage
tables are generated from the declarations (`python -m export_gelu.pipeline.dataflow
--write`). The progress channel, the clock and the report are every stage's and are not
listed.

What counts: `state.X` read; `state.X = …`, `state.X[…] = …`, `state.X.attr = …` or a
mutating call (`state.X.append(…)`, `.update`, …) written, also through
`need(state.X, …)` (state.py: the field, narrowed); a function handed the state, or
handed over together with it, is read too. A property reads the fields it is made of
(`state.feed` reads `feeds`). What it cannot see: a field's object changed through another
name (`rep = state.report; rep.x = …`) — one reason the report is not listed.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any

from export_gelu.pipeline.state import RunState

#: Fields every stage may touch without saying so: the run's channels (progress, the clock)
#: and the report, the record every stage adds its findings to (written out by the last).
CHANNELS = frozenset({"progress", "clock", "report"})
#: Properties of RunState → the fields they read.
PROPERTIES = {"feed": ("feeds",), "is_onnx": ("loaded",), "is_torch": ("loaded",)}
#: Methods that change the object they are called on.
MUTATORS = frozenset({"append", "extend", "insert", "update", "pop", "popitem", "clear",
                      "setdefault", "add", "remove", "discard", "sort"})
FIELDS = frozenset(f.name for f in dataclasses.fields(RunState))


@dataclasses.dataclass(frozen=True)
class Accesses:
    """The state fields a function reads and writes (a written field may be read too)."""

    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()

    def __or__(self, other: Accesses) -> Accesses:
        return Accesses(self.reads | other.reads, self.writes | other.writes)


def _root_field(node: ast.expr, names: set[str]) -> str | None:
    """The state field an expression chain starts from (`state.X...` → X, and
    `need(state.X, …)...`: the field, narrowed), else None."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id == "need" and node.args):
                return None
            node = node.args[0]
            continue
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in names):
            return node.attr
        node = node.value
    return None


def _fields(name: str) -> tuple[str, ...]:
    """The fields `state.<name>` reads: a property's, else the name itself (a name that is no
    field, such as a new property not in PROPERTIES, then fails the declared-names test)."""
    return PROPERTIES.get(name, (name,))


def _local_imports(tree: ast.AST) -> dict[str, Any]:
    """Names a function imports inside itself (`from export_gelu.x import f`) → objects."""
    found: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module \
                and node.module.startswith("export_gelu"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                found[alias.asname or alias.name] = getattr(module, alias.name, None)
    return found


def _resolve(fn: Any, call: ast.expr, local: dict[str, Any]) -> Callable[..., Any] | None:
    """The export-gelu function (or one of `fn`'s own module) an expression names (`f` or
    `module.f`), else None."""
    scope = {**getattr(fn, "__globals__", {}), **local}
    target: Any = None
    if isinstance(call, ast.Name):
        target = scope.get(call.id)
    elif isinstance(call, ast.Attribute) and isinstance(call.value, ast.Name):
        owner = scope.get(call.value.id)
        if isinstance(owner, types.ModuleType):
            target = getattr(owner, call.attr, None)
    target = inspect.unwrap(target) if callable(target) else None
    if not isinstance(target, types.FunctionType):
        return None
    ours = target.__module__.startswith("export_gelu.") or target.__module__ == fn.__module__
    return target if ours else None


def _params_given_state(call: ast.Call, callee: Callable[..., Any] | None, names: set[str]
                        ) -> set[str]:
    """The callee's parameters that receive the state in `call`."""
    if callee is None:
        return {"?"} if any(isinstance(a, ast.Name) and a.id in names for a in call.args) \
            else set()
    params = list(inspect.signature(callee).parameters)
    given: set[str] = set()
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Name) and arg.id in names and i < len(params):
            given.add(params[i])
    for kw in call.keywords:
        if isinstance(kw.value, ast.Name) and kw.value.id in names and kw.arg:
            given.add(kw.arg)
    return given


def _walk(fn: Callable[..., Any], tree: ast.AST, names: set[str]) -> Iterator[Accesses]:
    local = _local_imports(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in names:
            found = frozenset(_fields(node.attr))
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                yield Accesses(writes=found)
            else:
                yield Accesses(reads=found)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) \
                else [node.target]
            for target in targets:
                for part in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(part, (ast.Attribute, ast.Subscript)):
                        root = _root_field(part.value, names)
                        if root is not None:
                            yield Accesses(writes=frozenset(_fields(root)))
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in MUTATORS:
                root = _root_field(func.value, names)
                if root is not None:
                    yield Accesses(writes=frozenset(_fields(root)))
            callee = _resolve(fn, func, local)
            given = _params_given_state(node, callee, names)
            if callee is not None and given:
                yield _accesses(callee, frozenset(given))
            if given:  # a function handed over with the state is run on it
                for arg in node.args:
                    passed = _resolve(fn, arg, local)
                    if passed is not None and passed is not callee:
                        yield stage_accesses(passed)


def _source_tree(fn: Callable[..., Any]) -> ast.AST | None:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    return ast.parse(source)


_DONE: dict[tuple[Any, frozenset[str]], Accesses] = {}
_IN_PROGRESS: set[tuple[Any, frozenset[str]]] = set()


def _accesses(fn: Callable[..., Any], names: frozenset[str]) -> Accesses:
    """`fn`'s accesses through its parameters `names` (a call back into a function being
    read adds nothing new: its accesses are being collected already)."""
    key = (fn, names)
    if key in _DONE:
        return _DONE[key]
    if key in _IN_PROGRESS:
        return Accesses()
    tree = _source_tree(fn)
    if tree is None:
        return Accesses()
    _IN_PROGRESS.add(key)
    try:
        found = Accesses()
        for part in _walk(fn, tree, set(names)):
            found = found | part
    finally:
        _IN_PROGRESS.discard(key)
    _DONE[key] = Accesses(found.reads - CHANNELS, found.writes - CHANNELS)
    return _DONE[key]


def stage_accesses(fn: Callable[..., Any]) -> Accesses:
    """What a stage function (its first parameter: the state) reads and writes."""
    fn = inspect.unwrap(fn)
    first = next(iter(inspect.signature(fn).parameters))
    return _accesses(fn, frozenset({first}))


#: The command lists the docs show, in order: (heading, module attribute).
COMMANDS = (("export", "EXPORT"), ("one graph of several (`graphs`)", "GRAPH_STAGES"),
            ("verify", "VERIFY"), ("verify --device-outputs", "DEVICE_VERIFY"),
            ("verify --device-outputs of a forms bundle", "DEVICE_FORMS_VERIFY"),
            ("--compare-forms (and --gelu auto's first part)", "FORMS_REPORT"))
BEGIN, END = "<!-- stages: generated by python -m export_gelu.pipeline.dataflow --write -->", \
    "<!-- stages: end -->"


def _command_lists() -> dict[str, Any]:
    from export_gelu.pipeline import commands, export_command

    return {name: getattr(commands, name, None) or getattr(export_command, name)
            for _heading, name in COMMANDS}


def stage_tables() -> str:
    """The Markdown tables of every command's stages and what each reads and writes."""
    lists = _command_lists()
    out: list[str] = []
    for heading, name in COMMANDS:
        out += [f"**{heading}** (`{name}`)", "",
                "| stage | function | reads | writes |", "|---|---|---|---|"]
        for st in lists[name]:
            io = st.io
            fn = inspect.unwrap(st.run)
            where = f"`{fn.__module__.removeprefix('export_gelu.')}.{fn.__name__}`"
            reads = ", ".join(io.reads) if io else "(undeclared)"
            writes = ", ".join(io.writes) if io else "(undeclared)"
            out.append(f"| {st.name} | {where} | {reads} | {writes or '—'} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def with_tables(text: str) -> str:
    """`text` (docs/architecture.md) with the part between the markers regenerated."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n\n" + stage_tables() + "\n" + text[end:]


README_BEGIN, README_END = "<!-- stages: generated, see export_gelu/pipeline/dataflow.py -->", \
    "<!-- stages: end -->"


def readme_paragraph() -> str:
    """The README's sentence naming export's stages, in order, as the code lists them."""
    import textwrap

    names = " → ".join(st.name for st in _command_lists()["EXPORT"])
    text = ("Every command is a list of stages over one state (`export_gelu/pipeline/`), each "
            "declaring the fields it reads and writes (docs/architecture.md; a test holds them "
            f"to the code); export's: {names}.")
    return textwrap.fill(text, width=96, break_on_hyphens=False) + "\n"


def readme_with_stages(text: str) -> str:
    """`text` (README.md) with the part between its stage markers regenerated."""
    start, end = text.index(README_BEGIN) + len(README_BEGIN), text.index(README_END)
    return text[:start] + "\n" + readme_paragraph() + text[end:]


def main(argv: list[str] | None = None) -> int:
    """`--write`: regenerate docs/architecture.md's stage tables and the README's stage
    sentence; else print the tables."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m export_gelu.pipeline.dataflow")
    parser.add_argument("--write", action="store_true", help="update docs/architecture.md")
    args = parser.parse_args(argv)
    if not args.write:
        print(stage_tables(), end="")
        return 0
    root = Path(__file__).resolve().parents[2]
    doc, readme = root / "docs" / "architecture.md", root / "README.md"
    doc.write_text(with_tables(doc.read_text(encoding="utf-8")), encoding="utf-8")
    readme.write_text(readme_with_stages(readme.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
