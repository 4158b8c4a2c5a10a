"""Is a serialized ExportedProgram (an archive's models/*.json) free of text that torch would
run? Read before `torch.export.load` sees it (exporter/model_files/containment.py).

torch 2.13 builds Python from parts of that JSON and runs it (torch/_export/serde/
serialize.py, torch/fx/graph.py, torch/export/_unlift.py):

- a graph input's name becomes a parameter of the generated `forward`, unescaped
  (`x=__import__("os").system(...)` runs when torch.export.load compiles the graph);
- node names are set on the nodes as they are (the generated code's variable names);
- `forward_arg_names` become the parameters of `ExportedProgram.module()`'s forward;
- parameter, buffer and constant names become `getattr(self, "…")` in that forward, their
  parts quoted without escaping;
- `guards_code` is pasted into a function that `.module()` executes, and a string input's
  value into a guard in single quotes;
- every `expr_str` (symbolic sizes) goes through `sympy.sympify`, which evaluates Python.

So names must be Python identifiers (dotted where they are paths), string constants may not
hold quotes, backslashes or control characters, and guards and symbolic expressions must
parse as plain arithmetic over the forms torch writes (`L['x'].size()[0] <= 64`,
`Mul(Integer(2), Symbol('s17', positive=True, integer=True))`), with no call but to the
sympy and torch size functions it uses. `program_json_problems` lists what is not so.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PART = re.compile(r"[A-Za-z0-9_]+")
_PLAIN_STRING = re.compile(r"[^'\"\\\x00-\x1f\x7f]*")
#: Keys whose values are graph-local names (placeholders, node outputs, argument names).
_NAME_KEYS = frozenset({"name", "as_name"})
#: Keys whose values (str or list of str) are forward() parameter names.
_PARAMETER_LIST_KEYS = frozenset({"forward_arg_names"})
#: Maps keyed by graph-local names.
_NAMED_MAPS = frozenset({"tensor_values", "sym_int_values", "sym_float_values",
                         "sym_bool_values", "custom_obj_values"})
#: Free text torch never turns into code (stack traces, module paths, treespecs as JSON).
_FREE_TEXT = frozenset({"metadata", "in_spec", "out_spec", "stack_trace", "torch_version",
                        "schema_version", "treespec_namedtuple_fields"})
#: Functions a symbolic expression may call: sympy's constructors and the size functions
#: torch's deserializer puts in sympify's namespace (torch.utils._sympy.functions).
SYMPY_CALLS = frozenset({
    "Symbol", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "Max", "Min", "Abs",
    "Mod", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "StrictLessThan", "StrictGreaterThan",
    "LessThan", "GreaterThan", "Equality", "Unequality", "And", "Or", "Not", "floor",
    "ceiling", "sqrt", "Piecewise", "ITE", "BooleanTrue", "BooleanFalse", "FloorDiv",
    "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv",
    "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv",
    "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt", "RoundToInt",
    "RoundDecimal", "ToFloat", "Identity", "Tuple", "S", "IntInfinity", "NegativeIntInfinity",
    "Infinity", "NegativeInfinity"})
#: Methods a guard may call on an input (what torch's guards read).
GUARD_METHODS = frozenset({"size", "stride", "storage_offset", "dim", "numel"})
#: Functions a guard may call (sympy's, as torch prints guards, and math's tests).
GUARD_CALLS = SYMPY_CALLS | {"math", "isnan", "isinf", "int", "float", "bool", "len"}

_ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Load,
               ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.keyword, ast.Tuple)


def identifier(text: Any) -> bool:
    return isinstance(text, str) and bool(_IDENTIFIER.fullmatch(text))


def dotted_name(text: Any) -> bool:
    """`a.b.0.c` (parts of letters, digits, `_`), or "" (the root module)."""
    if not isinstance(text, str):
        return False
    return text == "" or all(_PART.fullmatch(p) for p in text.split("."))


def plain_string(text: Any) -> bool:
    return isinstance(text, str) and bool(_PLAIN_STRING.fullmatch(text))


def _parse(text: Any) -> ast.AST | None:
    if not isinstance(text, str) or len(text) > 100_000:
        return None
    try:
        return ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None


def sympy_expression(text: Any) -> bool:
    """A symbolic size as torch writes it (srepr or printed), and nothing else."""
    tree = _parse(text)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in SYMPY_CALLS):
                return False
        elif isinstance(node, (ast.Name, ast.Constant)):
            if not _plain_leaf(node):
                return False
        elif not isinstance(node, _ARITHMETIC):
            return False
    return True


def _plain_leaf(node: ast.Name | ast.Constant) -> bool:
    """A name that is an identifier, or a number, bool, None or identifier-like string."""
    if isinstance(node, ast.Name):
        return identifier(node.id)
    return isinstance(node.value, (int, float, bool, type(None))) or identifier(node.value)


def guard_expression(text: Any) -> bool:
    """A guard as torch writes it: arithmetic and comparisons over `L['input']...` subscripts,
    their `.size()`-like methods, numbers and sympy's functions."""
    tree = _parse(text)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                ok = func.attr in GUARD_METHODS or (
                    isinstance(func.value, ast.Name) and func.value.id == "math"
                    and func.attr in GUARD_CALLS)
            else:
                ok = isinstance(func, ast.Name) and func.id in GUARD_CALLS
            if not ok:
                return False
        elif isinstance(node, ast.Attribute):
            if node.attr not in GUARD_METHODS and not (
                    isinstance(node.value, ast.Name) and node.value.id == "math"):
                return False
        elif isinstance(node, ast.Subscript):
            continue
        elif isinstance(node, (ast.Name, ast.Constant)):
            if not _plain_leaf(node):
                return False
        elif not isinstance(node, _ARITHMETIC):
            return False
    return True


def _walk(node: Any, key: str | None = None) -> Iterator[tuple[str, str]]:
    """(what, why) for every piece of `node` that torch would run or paste into code."""
    if isinstance(node, dict):
        unnamed_argument = "arg" in node and node.get("name") == ""
        for k, v in node.items():
            if k in _FREE_TEXT or (unnamed_argument and k == "name"):
                continue  # torch writes "" for a higher-order op's positional argument
            if k in _NAMED_MAPS and isinstance(v, dict):
                for name in v:
                    if not identifier(name):
                        yield _name_problem(name)
            yield from _walk(v, k)
        return
    if isinstance(node, list):
        for item in node:
            yield from _walk(item, key)
        return
    if not isinstance(node, str) or key is None:
        return
    if key in _NAME_KEYS or key in _PARAMETER_LIST_KEYS:
        if not identifier(node):
            yield _name_problem(node)
    elif key.endswith(("_name", "_fqn")) or key in ("fqn", "target"):
        if not dotted_name(node):
            yield _name_problem(node)
    elif key == "expr_str":
        if not sympy_expression(node):
            yield (f"the symbolic expression {node[:80]!r}",
                   "is not plain arithmetic; torch evaluates it with sympy.sympify, which "
                   "runs Python")
    elif key == "guards_code":
        if not guard_expression(node):
            yield (f"the guard {node[:80]!r}",
                   "is not a plain size check; ExportedProgram.module() executes it")
    elif key == "as_string":
        if not plain_string(node):
            yield (f"the string {node[:80]!r}",
                   "holds quotes, backslashes or control characters; torch pastes string "
                   "inputs into code it executes")


def _name_problem(name: str) -> tuple[str, str]:
    return (f"the name {name[:80]!r}",
            "is not a Python identifier; torch writes names into the code it generates and "
            "runs")


def program_json_problems(doc: Any) -> list[tuple[str, str]]:
    """What in a serialized ExportedProgram torch would execute or paste into code it runs."""
    if not isinstance(doc, dict):
        return [("the serialized program", "is not a JSON object")]
    return list(_walk(doc))
