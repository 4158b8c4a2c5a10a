"""Each test's tier, from what it uses: `unit`, `integration` or `e2e` (docs/testing.md, "Tiers").

The tier is read at collection from the test's code, not from a list: the test function, the
fixtures it requests (their functions too) and, recursively, every function or class of the
`tests` package they name. What they name decides:

- `process`: they start another program (`subprocess`, `pty`, `os.fork`);
- `run`: they run a whole command: the CLI's `main` (`run_cli`, `cli_command`) or the API's
  `export`, `verify`, `compare_forms`, `inspect_model`;
- `model`: they build or load a real architecture: the bundled examples and the other model
  builders of `examples/` (directly or through `saved_model`, `saved_real`, the Hugging Face
  folders), or a graph `session_cache` keeps.

The tier those decide:

- `e2e`: lives in tests/e2e/; or starts another program; or runs a whole command on a real
  architecture (`run` and `model`);
- `integration`: runs a whole command on hand-built graphs or tiny modules (`run`), or reads
  a real architecture or a cached graph without running a command (`model`);
- `unit`: none of these: functions of the package on values and hand-built graphs.

A test added later is classified the same way, wherever it lives. `python -m tests.tiers`
prints the count of each tier (and `--why` each test's reasons).
"""

from __future__ import annotations

import dis
import inspect
import sys
import types
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

TIERS = ("unit", "integration", "e2e")
#: Modules whose names, once reached, start another program.
_PROCESS_MODULES = ("subprocess", "pty", "multiprocessing")
#: What starts export-gelu (or any Python) as a program of its own: (module, name).
_PYTHON = {("sys", "executable"), ("tests.cli_runs", "cli_command"),
           ("tests.docs_runner", "run_shell")}
#: What exports a module to a graph: module → names.
_EXPORTERS = {"torch.onnx": ("export", "dynamo_export"), "torch.export": ("export", "save"),
              "torch.jit": ("trace", "script", "save")}
#: The functions that run a whole command: (module, name).
_RUNNERS = {("export_gelu.cli", "main"), ("tests.cli_runs", "run_cli"),
            ("tests.cli_runs", "cli_command"), ("tests.conftest", "run_cli")}
_API = ("export", "verify", "compare_forms", "inspect_model", "forms_report")
#: Fixtures that hand the test a model built from examples/ or a cached graph.
_MODEL_FIXTURES = ("saved_model", "saved_real", "session_cache")
#: The model builders: `examples.<module>` in a clone is `export_gelu.examples.<module>`
#: (examples/__init__.py), the module a function of theirs names as its own.
_MODEL_MODULES = ("examples", "export_gelu.examples")
#: The top-level modules whose attributes the walk reads (`module.name`, `from module import
#: name`): only these lead to a rule above or to a function of ours. Reading others' could
#: import a lazy library's parts (transformers) at collection, for nothing.
_READ_TOPS = frozenset({*_PROCESS_MODULES, "os", "sys", "tests", "examples", "torch",
                        "export_gelu"})


def _module_of(obj: Any) -> str:
    return getattr(obj, "__module__", None) or ""


def _is_ours(obj: Any) -> bool:
    """A function or class of the tests package (followed into)."""
    return (inspect.isfunction(obj) or inspect.isclass(obj)) and \
        _module_of(obj).split(".")[0] == "tests"


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _functions_of(obj: Any) -> Iterator[types.FunctionType]:
    if inspect.isfunction(obj):
        yield obj
    elif inspect.isclass(obj):
        for value in vars(obj).values():
            value = getattr(value, "__func__", value)
            if inspect.isfunction(value):
                yield value


def _name_uses(module: str, name: str) -> set[str]:
    """What naming `name` from `module` (an import, or an attribute of the module) says."""
    found = set()
    top = module.split(".")[0]
    if top in _PROCESS_MODULES or (module == "os" and name in ("fork", "forkpty", "system")):
        found.add("process")
    if (module, name) in _PYTHON:
        found.add("python")
    if any(module == m or module.startswith(m + ".") for m in _MODEL_MODULES) or \
            module == "tests.hf_folders":
        found.add("model")
    if module in _EXPORTERS and name in _EXPORTERS[module]:
        found.add("export")
    if (module, name) in _RUNNERS or \
            (module in ("export_gelu", "export_gelu.api") and name in _API):
        found.add("run")
    return found


def _object_uses(obj: Any) -> set[str]:
    """What a global the code names says, by what it is."""
    if isinstance(obj, types.ModuleType):
        return _name_uses(obj.__name__, "")
    module = _module_of(obj)
    name = getattr(obj, "__name__", "")
    found = _name_uses(module, name)
    if module.startswith("export_gelu.api") and name in _API:
        found.add("run")
    return found


#: The instructions the walk reads (by name; the rest only end a `module.name` chain).
_READ = ("IMPORT_NAME", "IMPORT_FROM", "STORE_FAST", "STORE_NAME", "STORE_DEREF", "LOAD_FAST",
         "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_ATTR", "LOAD_METHOD")
_OPS = {dis.opmap[n]: n for n in _READ if n in dis.opmap}
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]
_CACHE = dis.opmap.get("CACHE")  # 3.11+: inline cache entries, zero in co_code
_LOCALS = ("STORE_FAST", "LOAD_FAST", "STORE_DEREF", "LOAD_DEREF", "LOAD_CLOSURE")
#: Name arguments shifted by flags packed into their low bits: (op, Python from, shift).
_SHIFTED = (("LOAD_GLOBAL", (3, 11), 1), ("LOAD_ATTR", (3, 12), 1))


def _argval(code: types.CodeType, name: str, arg: int) -> str:
    """The name an instruction of `_READ` names, as `dis` resolves it."""
    for op, since, shift in _SHIFTED:
        if name == op and sys.version_info >= since:
            arg >>= shift
    if name in _LOCALS:
        if sys.version_info >= (3, 11):
            return code._varname_from_oparg(arg)  # type: ignore[attr-defined]
        if name.endswith("_FAST"):
            return code.co_varnames[arg]
        return (code.co_cellvars + code.co_freevars)[arg]
    return code.co_names[arg]


def instructions(code: types.CodeType) -> Iterator[tuple[str | None, str | None]]:
    """(name, argument) of each instruction of `code`, for those of `_READ` (else (None,
    None)), read straight from its bytes: what `dis.get_instructions` gives, less the
    `EXTENDED_ARG` prefixes and the inline caches, at a tenth of the cost (collection reads
    every test's code; tests/tooling/test_harness.py compares the two)."""
    raw = code.co_code
    extended = 0
    for i in range(0, len(raw), 2):
        op = raw[i]
        if op == _EXTENDED_ARG:
            extended = (extended | raw[i + 1]) << 8
            continue
        arg, extended = extended | raw[i + 1], 0
        if op == _CACHE:
            continue
        name = _OPS.get(op)
        yield (name, _argval(code, name, arg)) if name else (None, None)


def _attribute(module: str | None, name: str) -> Any:
    """`module.name` where the walk reads that module's attributes (`_READ_TOPS`), else None."""
    if not module or module.split(".")[0] not in _READ_TOPS:
        return None
    return getattr(sys.modules.get(module), name, None)


@cache
def _function_uses(func: types.FunctionType) -> tuple[frozenset[str], tuple[Any, ...]]:
    """(what `func`'s code says by itself, the functions and classes of ours it names)."""
    found: set[str] = set()
    followed: list[Any] = []
    env = func.__globals__
    for code in _codes(func.__code__):
        importing: str | None = None
        modules: dict[str, str] = {}  # local name → the module imported into it
        loaded: str | None = None  # the module the previous instruction loaded
        for op, name in instructions(code):
            module, loaded = loaded, None
            if op is None or name is None:
                continue
            if op == "IMPORT_NAME":
                importing = name
                found |= _name_uses(name, "")
                loaded = name
            elif op == "IMPORT_FROM" and importing is not None:
                found |= _name_uses(importing, name)
                value = _attribute(importing, name)
                if isinstance(value, types.ModuleType):
                    loaded = value.__name__
                elif value is not None and _is_ours(value):
                    followed.append(value)
            elif op in ("STORE_FAST", "STORE_NAME", "STORE_DEREF") and module:
                modules[name] = module
            elif op in ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE") and name in modules:
                loaded = modules[name]
            elif op in ("LOAD_GLOBAL", "LOAD_NAME") and name in env:
                value = env[name]
                found |= _object_uses(value)
                if isinstance(value, types.ModuleType):
                    loaded = value.__name__
                elif _is_ours(value):
                    followed.append(value)
            elif op in ("LOAD_ATTR", "LOAD_METHOD") and module:
                found |= _name_uses(module, name)
                value = _attribute(module, name)
                if isinstance(value, types.ModuleType):
                    loaded = value.__name__
                elif value is not None and _is_ours(value):
                    followed.append(value)
    return frozenset(found), tuple(followed)


@cache
def _reach(func: types.FunctionType) -> frozenset[str]:
    """What `func` reaches, following what of ours it names (kept: a fixture's function or a
    helper is reached from many tests)."""
    found: set[str] = set()
    seen: set[int] = set()
    todo = [func]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        own, followed = _function_uses(f)
        found |= own
        todo += [g for obj in followed for g in _functions_of(obj)]
    return frozenset(found)


def uses_of(roots: Iterable[Any]) -> set[str]:
    """What the functions in `roots` reach (following what of ours they name)."""
    found: set[str] = set()
    for root in roots:
        for func in _functions_of(root):
            found |= _reach(func)
    return found


def _fixture_uses(item: pytest.Item) -> set[str]:
    """What the test's fixtures reach. A fixture that keeps what it builds in
    `session_cache` runs its commands once for every test, worker and session: what it
    reaches counts as a cached graph (`model`), not as the test's own run."""
    info = getattr(item, "_fixtureinfo", None)
    found: set[str] = set()
    for defs in (info.name2fixturedefs.values() if info else []):
        for fixturedef in defs:
            func = getattr(fixturedef, "func", None)
            if func is None or not _is_ours(func):
                continue
            reached = uses_of([func])
            if "session_cache" in getattr(fixturedef, "argnames", ()) and reached:
                reached = {"model"}
            found |= reached
    return found


def _params(item: pytest.Item) -> list[Any]:
    """Callables among a parametrized test's arguments (builders of its case)."""
    spec = getattr(item, "callspec", None)
    values = list(spec.params.values()) if spec else []
    out = []
    for v in values:
        out += [x for x in (v if isinstance(v, (tuple, list)) else [v]) if _is_ours(x)]
    return out


def uses(item: pytest.Item) -> set[str]:
    """What a collected test uses: 'process', 'run', 'model' (module docstring)."""
    found = uses_of([getattr(item, "obj", None), *_params(item)]) | _fixture_uses(item)
    if any(f in getattr(item, "fixturenames", ()) for f in _MODEL_FIXTURES):
        found.add("model")
    return found


def tier_of(item: pytest.Item, root: Path) -> str:
    """The tier of a collected test (module docstring)."""
    used = uses(item)
    try:
        folder = Path(str(item.path)).resolve().relative_to(root / "tests").parts[0]
    except ValueError:
        folder = ""
    if folder == "e2e" or "python" in used or {"run", "model"} <= used:
        return "e2e"
    if used & {"run", "model", "export", "process"}:
        return "integration"
    return "unit"


def mark_tiers(items: list[pytest.Item], root: Path) -> None:
    """Add each test's tier marker (pytest_collection_modifyitems)."""
    for item in items:
        tier = tier_of(item, root)
        item.add_marker(getattr(pytest.mark, tier))
        item.user_properties.append(("tier", tier))


class _Count:
    """A plugin that counts the tiers of the collected tests."""

    def __init__(self, why: bool, root: Path) -> None:
        self.why, self.root = why, root
        self.rows: list[tuple[str, str, bool, set[str]]] = []

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            slow = item.get_closest_marker("slow") is not None
            self.rows.append((item.nodeid, tier_of(item, self.root), slow, uses(item)))


def main(argv: list[str] | None = None) -> int:
    """Count the collected tests of each tier (pytest arguments pass through)."""
    args = list(sys.argv[1:] if argv is None else argv)
    why = "--why" in args
    args = [a for a in args if a != "--why"]
    count = _Count(why, Path(__file__).resolve().parents[1])
    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *args],
                       plugins=[count])
    if why:
        for nodeid, tier, slow, used in count.rows:
            print(f"{tier}\t{'slow' if slow else '-'}\t{','.join(sorted(used)) or '-'}\t{nodeid}")
    print("| tier | tests | not slow | slow |")
    print("|---|---|---|---|")
    for tier in TIERS:
        rows = [r for r in count.rows if r[1] == tier]
        quick = sum(not r[2] for r in rows)
        print(f"| {tier} | {len(rows)} | {quick} | {len(rows) - quick} |")
    quick = sum(not r[2] for r in count.rows)
    print(f"| all | {len(count.rows)} | {quick} | {len(count.rows) - quick} |")
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
