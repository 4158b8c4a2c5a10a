"""Does a TorchScript or ExportedProgram file only compute on tensors? Checked before any of
its code runs (docs/safety.md).

A TorchScript file is code: its methods can call `torch.from_file` (read, or map and write,
any file), `torch.save` (write one), RPC, ops of any registered namespace or custom C++
classes, and a class's `__setstate__` runs while `torch.jit.load` rebuilds the object. An
ExportedProgram's graph is code too: `torch.export.load` resolves a node's target from any
`torch.…` name in the archive. So, unless the user trusts the file (`--trust-model`):

1. `archive_findings` (before loading, read through torch's own archive reader, so the bytes
   checked are the bytes the loader reads): member names that differ only in case (that
   reader matches names in any case, so it could read another member than the check did),
   any TorchScript source that mentions `__setstate__`, and pickled objects of custom C++
   classes (`__torch__.torch.classes.…`, whose `__setstate__` is C++). Once these are
   absent, nothing of the model runs while `torch.jit.load` rebuilds it.
2. `script_findings` (after loading, before anything calls it): every function the load
   compiled (each method of each module and class, hooks, free functions, forked closures:
   the compilation unit holds them all, reachable or not) is walked, nested blocks and
   subgraphs included; every op must be of a tensor namespace (`aten`, `prim`, `prims`) and
   not one of `REFUSED_OPS`, and no value may be of a custom class.
3. `program_findings` (after `torch.export.load`, before `.module()` or a run): every node of
   every graph (control-flow branches included) must call an op as above, a known
   higher-order op (`ALLOWED_HIGHER_ORDER`), or a pure arithmetic builtin; no torchbind
   object may be among its constants.
"""

from __future__ import annotations

import math
import operator
import re
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from export_gelu.bounded_json import parse_json
from export_gelu.errors import BadInputError
from export_gelu.exporter.model_files.detect import (
    LEGACY_PROGRAM,
    PROGRAM_CODE_MEMBERS,
    pickle_globals,
)
from export_gelu.exporter.model_files.torch_reader import torch_reader as _torch_reader

TRUST_HINT = ("pass --trust-model (alias --allow-pickle) only if you trust where the file "
              "came from")
#: Op namespaces that compute on tensors (plus TorchScript's own lists, objects and control).
TENSOR_NAMESPACES = frozenset({"aten", "prim", "prims"})
#: Ops of those namespaces that touch the world instead (found in torch's op registry,
#: torch._C._jit_get_all_schemas(), torch 2.13: every op whose name or string arguments
#: speak of files, processes, Python or the network).
REFUSED_OPS = {
    "aten::from_file": "reads any file (or, shared, maps it and writes it)",
    "aten::save": "writes a file",
    "prim::PythonOp": "calls Python",
    "prim::IgnoredPythonOp": "calls Python",
    "prim::rpc_async": "calls another process (torch.distributed.rpc)",
    "prim::rpc_sync": "calls another process (torch.distributed.rpc)",
    "prim::rpc_remote": "calls another process (torch.distributed.rpc)",
}
#: Higher-order ops an ExportedProgram may use: control flow and grad/autocast regions,
#: whose bodies are graphs of the same program (and are checked like it).
ALLOWED_HIGHER_ORDER = frozenset({
    "cond", "while_loop", "map_impl", "scan", "associative_scan", "invoke_subgraph",
    "wrap_with_set_grad_enabled", "wrap_with_autocast", "flex_attention"})
#: Higher-order ops that wrap one op (its first or second argument): allowed when it is.
_WRAPPING_HIGHER_ORDER = {"auto_functionalized": 0, "auto_functionalized_v2": 0,
                          "with_effects": 1}
#: Plain functions an ExportedProgram node may call (what torch.export writes for Python
#: arithmetic on sizes): pure, on numbers and tuples; never attrgetter/methodcaller.
_PURE_OPERATOR = ("getitem", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg",
                  "pos", "abs", "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "xor",
                  "not_", "invert", "lshift", "rshift", "truth")
_PURE_TORCH = ("sym_int", "sym_float", "sym_max", "sym_min", "sym_not", "sym_ite", "sym_sqrt",
               "sym_sum", "_sym_sqrt", "_check", "_check_is_size")
#: A custom C++ class's qualified name starts so (in TorchScript types and pickles).
CUSTOM_CLASS_PREFIX = "__torch__.torch.classes."
#: Largest TorchScript source member read for the scan (a model's code is far smaller).
MAX_SOURCE_BYTES = 64 << 20


@dataclass(frozen=True)
class Finding:
    """Something the file would run that is not tensor computation: what, where, why."""

    what: str
    where: str
    why: str

    def describe(self) -> str:
        return f"{self.what} (in {self.where}) {self.why}"


def refuse(path: Path, kind: str, findings: list[Finding]) -> None:
    """Raise the exit-2 refusal naming the first finding (and how many more there are)."""
    if not findings:
        return
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    raise BadInputError(f"{path}: refusing to run this {kind}: {findings[0].describe()}{more}; "
                        "export-gelu runs a model's code only when all of it computes on "
                        f"tensors; {TRUST_HINT}")


# -- 1. the archive, before loading -------------------------------------------------------


def _case_clashes(names: Iterable[str]) -> list[str]:
    seen: dict[str, str] = {}
    clashes = []
    for name in names:
        key = name.lower()
        if key in seen:
            clashes.append(f"{seen[key]!r} and {name!r}")
        seen[key] = name
    return clashes


def _clashes(names: list[str]) -> list[Finding]:
    return [Finding("two members of one name", clash,
                    "would let torch's reader (names match in any case) read another member "
                    "than the check did")
            for clash in _case_clashes(names)]


#: Prefixes of a constant's `path_name` (in data/constants/*_constants_config.json) that make
#: torch.export.load unpickle it (torch/export/pt2_archive/_package.py, torch 2.13).
_UNPICKLED_CONSTANTS = ("opaque_obj_", "custom_obj_")


#: A payload's `path_name`: a member of the config's own folder (torch 2.13 writes
#: `weight_0`, `tensor_3`, `opaque_obj_0`); never a path with parts.
_PLAIN_MEMBER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}")
_PROGRAM_JSON = re.compile(r"models/[^/]*\.json")
_PAYLOAD_CONFIG = re.compile(r"data/(constants|weights)/[^/]*_config\.json")
#: Largest serialized program read for the check (its graph is in it, not its weights).
MAX_PROGRAM_JSON = 256 << 20


def program_archive_findings(path: Path) -> list[Finding]:
    """What an ExportedProgram archive would run while torch.export.load reads it or
    `.module()` builds its forward: members holding code (by name, in any case), constants
    its config says to unpickle (whatever the member is called), and any text of the
    serialized program that torch turns into Python source or evaluates (program_json),
    plus members whose names differ only in case. An archive in the layout of torch 2.7 and
    older (its program at the root, where torch's reader refuses to look) is read as
    torch.export.load reads it: with Python's zipfile, by exact name."""
    if _legacy_layout(path):
        return _legacy_findings(path)
    with _torch_reader(path) as reader:
        names = list(reader.get_all_records())
        findings = _clashes(names)
        for name in names:
            lower = name.lower()
            if any(lower.startswith(m) for m in PROGRAM_CODE_MEMBERS):
                findings.append(Finding(name, "the archive",
                                        "is code or a pickled object that loading would run"))
            elif _PAYLOAD_CONFIG.fullmatch(lower):
                findings.extend(_config_findings(reader, name))
            elif _PROGRAM_JSON.fullmatch(lower):
                findings.extend(_document_findings(reader, name))
    return findings + _legacy_findings(path)


def _legacy_layout(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as zf:
            return LEGACY_PROGRAM in zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise BadInputError(f"{path}: corrupt or unreadable archive ({exc})") from exc


def _legacy_findings(path: Path) -> list[Finding]:
    """torch.export.load falls back to torch 2.7's layout, read with Python's zipfile: a
    `serialized_exported_program.json` at the archive's root (every copy is checked)."""
    from export_gelu.exporter.model_files.program_json import program_json_problems

    findings: list[Finding] = []
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.filename != LEGACY_PROGRAM:
                    continue
                if info.file_size > MAX_PROGRAM_JSON:
                    findings.append(Finding("an oversized program", info.filename,
                                            "cannot be checked"))
                    continue
                try:
                    doc = parse_json(zf.read(info), f"{path}: {info.filename}",
                                     max_bytes=MAX_PROGRAM_JSON)
                except BadInputError:
                    findings.append(Finding("malformed or too deeply nested JSON",
                                            info.filename, "cannot be checked"))
                    continue
                findings += [Finding(what, info.filename, why)
                             for what, why in program_json_problems(doc)[:20]]
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError,
            NotImplementedError, RuntimeError) as exc:
        raise BadInputError(f"{path}: corrupt or unreadable archive ({exc})") from exc
    return findings


def _json_record(reader: Any, name: str) -> tuple[Any, list[Finding]]:
    if reader.get_record_size(name) > MAX_PROGRAM_JSON:
        return None, [Finding(f"{reader.get_record_size(name)} bytes of JSON", name,
                              "is more than a serialized program holds; it was not read")]
    try:
        return parse_json(bytes(reader.get_record(name)), name, max_bytes=MAX_PROGRAM_JSON), []
    except BadInputError:
        return None, [Finding("malformed or too deeply nested JSON", name, "cannot be checked")]


def _document_findings(reader: Any, name: str) -> list[Finding]:
    from export_gelu.exporter.model_files.program_json import program_json_problems

    doc, findings = _json_record(reader, name)
    if doc is None:
        return findings
    return [Finding(what, name, why) for what, why in program_json_problems(doc)[:20]]


def _config_findings(reader: Any, name: str) -> list[Finding]:
    from export_gelu.exporter.model_files.program_json import dotted_name

    config, findings = _json_record(reader, name)
    if config is None:
        return findings
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        return [Finding("a malformed payload config", name, "cannot be checked")]
    for fqn, meta in entries.items():
        path_name = str(meta.get("path_name", "")) if isinstance(meta, dict) else ""
        if not _PLAIN_MEMBER.fullmatch(path_name):
            findings.append(Finding(f"{fqn!r}'s path_name {path_name[:80]!r}", name,
                                    "is not a plain member name of the archive's payload "
                                    "folder (a path out of it is never read)"))
        elif path_name.startswith(_UNPICKLED_CONSTANTS):
            findings.append(Finding(f"constant {fqn!r} ({path_name})", name,
                                    "is a pickled object that loading would unpickle (run)"))
        if not dotted_name(fqn):
            findings.append(Finding(f"the name {fqn[:80]!r}", name,
                                    "is not a dotted Python name; torch writes such names "
                                    "into the code it generates"))
    return findings


def archive_findings(path: Path) -> list[Finding]:
    """What a TorchScript archive would run while it loads, or could hide from the scan."""
    with _torch_reader(path) as reader:
        names = list(reader.get_all_records())
        findings = _clashes(names)
        for name in names:
            lower = name.lower()
            if lower.endswith(".py"):
                findings.extend(_source_findings(reader, name))
            elif lower.endswith(".pkl") and not lower.endswith(".debug_pkl"):
                findings.extend(_pickle_findings(reader, name))
    return findings


def _names_custom_class(reader: Any, name: str) -> list[Finding]:
    """A custom C++ class named anywhere in a member (a pickle cannot build the name from
    parts, and a class attribute's type names it in the code)."""
    if CUSTOM_CLASS_PREFIX.encode()[len("__torch__."):] not in bytes(reader.get_record(name)):
        return []
    return [Finding("torch.classes", name,
                    "names a custom C++ class, whose code runs while the file loads (its "
                    "__setstate__) and cannot be checked")]


def _source_findings(reader: Any, name: str) -> list[Finding]:
    size = reader.get_record_size(name)
    if size > MAX_SOURCE_BYTES:
        return [Finding(f"{size} bytes of code", name,
                        "is more than any model's code holds; it was not read")]
    if b"__setstate__" in bytes(reader.get_record(name)):
        return [Finding("__setstate__", name,
                        "runs while the file loads, before its code can be checked")]
    return _names_custom_class(reader, name)


def _pickle_findings(reader: Any, name: str) -> list[Finding]:
    if reader.get_record_size(name) > MAX_SOURCE_BYTES:
        return [Finding("an oversized pickle", name, "is more than any model's structure")]
    try:
        globals_ = pickle_globals(bytes(reader.get_record(name)))
    except BadInputError:
        globals_ = []  # torch.jit.load reports a corrupt pickle in its own words
    named = [Finding(g.replace(" ", "."), name,
                     "is a custom C++ class, whose code runs while the file loads and cannot "
                     "be checked")
             for g in globals_ if g.startswith(CUSTOM_CLASS_PREFIX.rstrip("."))]
    return named or _names_custom_class(reader, name)


# -- 2. TorchScript, loaded, before it runs ------------------------------------------------


def _blocks_nodes(block: Any) -> Iterator[Any]:
    """Every node of a TorchScript graph or block: nested blocks (if/loop bodies) and graph
    attributes (fork and awaitable bodies, fusion groups) included."""
    for node in block.nodes():
        yield node
        for inner in node.blocks():
            yield from _blocks_nodes(inner)
        for name in node.attributeNames():
            kind = node.kindOf(name)
            if kind == "g":
                yield from _blocks_nodes(node.g(name))
            elif kind == "gs":
                for graph in node.gs(name):
                    yield from _blocks_nodes(graph)


def _op_why(name: str) -> str | None:
    """Why an op (`ns::name`) is refused, or None when it computes on tensors."""
    namespace = name.split("::", 1)[0]
    if name in REFUSED_OPS:
        return REFUSED_OPS[name]
    if namespace not in TENSOR_NAMESPACES:
        return (f"is an op of the {namespace!r} namespace (not a tensor op of aten/prim: "
                "registered by a library, its code cannot be checked)")
    return None


def _custom_class_in(values: Iterable[Any]) -> str | None:
    for value in values:
        text = str(value.type())
        if CUSTOM_CLASS_PREFIX in text:
            return text
    return None


def graph_findings(graph: Any, where: str) -> list[Finding]:
    """Refused ops and custom-class values in one TorchScript graph."""
    findings = []
    custom = _custom_class_in(graph.inputs())
    if custom:
        findings.append(Finding(custom, where,
                                "is a custom C++ class, whose code cannot be checked"))
    for node in _blocks_nodes(graph):
        kind = node.kind()
        why = _op_why(kind)
        if why:
            findings.append(Finding(kind, where, why))
        custom = _custom_class_in(list(node.outputs()) + list(node.inputs()))
        if custom:
            findings.append(Finding(custom, where,
                                    "is a custom C++ class, whose code cannot be checked"))
    return findings


def script_functions(compilation_unit: Any, module: Any) -> dict[str, Any]:
    """Every compiled function: the compilation unit's (methods, hooks, functions, classes'
    methods) and, in case one is missing there, each module's methods."""
    found: dict[str, Any] = {}
    for fn in compilation_unit.get_functions():
        found.setdefault(fn.qualified_name, fn.graph)
    for name, sub in module.named_modules():
        c = getattr(sub, "_c", None)
        if c is None:
            continue
        for method in c._method_names():
            qualified = f"{c._type().qualified_name()}.{method}"
            found.setdefault(qualified or f"{name}.{method}", c._get_method(method).graph)
    return found


def script_findings(compilation_unit: Any, module: Any) -> list[Finding]:
    findings: list[Finding] = []
    for where, graph in script_functions(compilation_unit, module).items():
        findings.extend(graph_findings(graph, where))
    return findings


# -- 3. ExportedProgram, loaded, before it runs --------------------------------------------


def _pure_builtins() -> frozenset[Any]:
    import torch

    funcs = [getattr(operator, n) for n in _PURE_OPERATOR]
    funcs += [getattr(math, n) for n in dir(math) if callable(getattr(math, n))]
    funcs += [getattr(torch, n) for n in _PURE_TORCH if hasattr(torch, n)]
    return frozenset(funcs)


def _target_why(target: Any, node: Any, pure: frozenset[Any]) -> str | None:
    """Why a call_function node's target is refused, or None."""
    import torch

    if isinstance(target, torch._ops.OpOverload):
        return _op_why(target._schema.name)
    if isinstance(target, torch._ops.HigherOrderOperator):
        name = target.name()
        if name in ALLOWED_HIGHER_ORDER:
            return None
        if name in _WRAPPING_HIGHER_ORDER:
            at = _WRAPPING_HIGHER_ORDER[name]
            inner = node.args[at] if len(node.args) > at else None
            if isinstance(inner, torch._ops.OpOverload):
                return _op_why(inner._schema.name)
            return f"wraps {str(inner)[:80]!r}, which is not an op"
        return "is a higher-order op that runs code other than the program's graphs"
    try:
        if target in pure:
            return None
    except TypeError:  # unhashable
        pass
    return "is a Python function, not a tensor op"


def _target_name(target: Any) -> str:
    import torch

    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    return f"{module}.{name}" if name else repr(target)[:80]


def _is_custom_object(value: Any) -> bool:
    import torch

    if isinstance(value, torch.ScriptObject):
        return True
    return type(value).__name__ == "FakeScriptObject"


def program_findings(program: Any) -> list[Finding]:
    """What an ExportedProgram's graphs call that is not tensor computation."""
    pure = _pure_builtins()
    findings: list[Finding] = []
    for name, value in (getattr(program, "constants", None) or {}).items():
        if _is_custom_object(value):
            findings.append(Finding(f"custom object {name!r}", "the program's constants",
                                    "is a custom C++ class, whose code cannot be checked"))
    for module_name, gm in program.graph_module.named_modules():
        graph = getattr(gm, "graph", None)
        if graph is None:
            continue
        place = f"graph {module_name}" if module_name else "the graph"
        for node in graph.nodes:
            where = f"{place}, node {node.name!r}"
            if node.op in ("placeholder", "output"):
                continue
            if node.op == "get_attr":
                value = _attr(gm, str(node.target))
                if _is_custom_object(value):
                    findings.append(Finding(f"custom object {node.target!r}", where,
                                            "is a custom C++ class, whose code cannot be checked"))
                continue
            if node.op != "call_function":
                findings.append(Finding(f"a {node.op} node", where,
                                        "is not a call of an op (torch.export writes none)"))
                continue
            why = _target_why(node.target, node, pure)
            if why:
                findings.append(Finding(_target_name(node.target), where, why))
    return findings


def _attr(module: Any, dotted: str) -> Any:
    value = module
    for part in dotted.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value
