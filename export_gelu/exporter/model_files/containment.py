"""Does a TorchScript or ExportedProgram file only compute on tensors? Checked before any of
its code runs (docs/safety.md).

A TorchScript file is code: its methods can call `torch.from_file` (read, or map and write,
any file), `torch.save` (write one), RPC, ops of any registered namespace or custom C++
classes, and a class's `__setstate__` runs while `torch.jit.load` rebuilds the object. An
ExportedProgram's graph is code too: `torch.export.load` resolves a node's target from any
`torch.…` name in the archive. So, unless the user trusts the file (`--trust-model`):

1. `archive_findings` (archive_checks.py; before loading, read through torch's own archive
   reader, so the bytes checked are the bytes the loader reads): member names that differ only
   in case (that reader matches names in any case, so it could read another member than the
   check did), any TorchScript source that mentions `__setstate__`, and pickled objects of
   custom C++ classes (`__torch__.torch.classes.…`, whose `__setstate__` is C++). Once these are
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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from export_gelu.errors import BadInputError

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
