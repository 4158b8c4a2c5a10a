"""Find every GELU in a captured graph and turn each formula into one `aten.gelu` node.

Built-in GELUs (`nn.GELU`, `F.gelu`, `aten.gelu`) are already canonical and only recorded.
Hand-written formulas are matched on their canonical form (`expr.py`, `patterns.py`) and
replaced by `aten.gelu(x, approximate=none|tanh)`. QuickGELU is recorded as kind `quick`
and left alone: it is a different function.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import fx
from torch.export import ExportedProgram

from export_gelu.graph.provenance import source_in
from export_gelu.passes.fx import expr as ex
from export_gelu.passes.fx.patterns import GeluRule, match_rule
from export_gelu.passes.sites import GeluSite

aten = torch.ops.aten
GELU = aten.gelu.default
_META_KEYS = ("val", "tensor_meta", "nn_module_stack", "stack_trace", "source_fn_stack")
#: Ops through which a one-element constant keeps its value (how torch.tensor(c) is traced).
_SAME_VALUE = {aten.lift_fresh_copy.default, aten.detach_.default, aten.detach.default,
               aten.clone.default, aten.alias.default, aten._to_copy.default,
               aten.to.dtype, aten.to.dtype_layout}


def module_path(node: fx.Node) -> str:
    """The dotted module path a node came from (its innermost `nn_module_stack` entry)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, _cls = list(stack.values())[-1]
    return str(path).replace("L['self'].", "").replace("L__self__", "").lstrip(".")


def module_class(node: fx.Node) -> str:
    """The qualified class name of the innermost module a node came from ("" if unknown)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    _path, cls = list(stack.values())[-1]
    return cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"


def gelu_kind(node: fx.Node) -> str:
    """`exact` or `tanh` for an `aten.gelu` node."""
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return "tanh" if approximate == "tanh" else "exact"


def called_at(node: fx.Node) -> str:
    """'Net.forward, model.py:18': the forward of the innermost module a functional GELU
    (or formula) was written in, and the line of the model's code that calls it ("" when
    the graph does not record them)."""
    cls = module_class(node).rsplit(".", 1)[-1]
    where = f"{cls}.forward" if cls else ""
    source = source_in(str(node.meta.get("stack_trace") or ""))
    if source:
        path, _, line = source.rpartition(":")
        where = f"{where}, {Path(path).name}:{line}" if where else f"{Path(path).name}:{line}"
    return where


def _where(node: fx.Node) -> str:
    cls = module_class(node).rsplit(".", 1)[-1]
    return f" in {cls}" if cls else ""


def _builtin_source(node: fx.Node) -> str:
    if module_class(node) == "torch.nn.modules.activation.GELU":
        return "nn.GELU" + ("(approximate='tanh')" if gelu_kind(node) == "tanh" else "")
    mode = ", approximate='tanh'" if gelu_kind(node) == "tanh" else ""
    return f"F.gelu(x{mode}) / aten.gelu{_where(node)}"


_SPANNABLE = ex.ARITHMETIC | set(ex.FUNCTIONS) | set(ex.CONSTANT_ONLY)


def spanned_nodes(root: fx.Node, x_node: fx.Node) -> list[fx.Node]:
    """The nodes of the formula rooted at `root` (its single-user arithmetic, up to `x_node`),
    each listed after its user: erasing them in this order never erases a used node."""
    order, seen, todo = [root], {root, x_node}, list(root.all_input_nodes)
    while todo:
        node = todo.pop()
        if (node in seen or node.op != "call_function" or node.target not in _SPANNABLE
                or len(node.users) != 1):
            continue
        seen.add(node)
        order.append(node)
        todo.extend(node.all_input_nodes)
    return order


def _formula_source(rule: GeluRule, spanned: list[fx.Node], root: fx.Node) -> str:
    """The rule's name, whether it cubes with `pow` (fp16 overflow risk), and the module."""
    cube = ""
    if rule.kind == "tanh":
        uses_pow = any(n.target is aten.pow.Tensor_Scalar for n in spanned)
        cube = " with pow(x, 3)" if uses_pow else " with x*x*x"
    return f"{rule.name}{cube}{_where(root)}"


def scalar_constants(program: ExportedProgram) -> ex.Scalars:
    """Nodes of an ExportedProgram that hold a one-element floating constant, by value.

    Lifted tensor constants (as `torch.tensor(c)` and TorchScript conversion leave them) and
    buffers that are never mutated, followed through value-preserving ops.
    """
    sig = program.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    sources = {**{k: v for k, v in sig.inputs_to_buffers.items() if v not in mutated},
               **sig.inputs_to_lifted_tensor_constants}
    tensors = {**program.state_dict, **program.constants}
    found: ex.Scalars = {}
    for node in program.graph_module.graph.nodes:
        if node.op == "placeholder" and node.name in sources:
            value = tensors.get(sources[node.name])
            if (isinstance(value, torch.Tensor) and value.numel() == 1
                    and value.is_floating_point()):
                found[node] = float(value.item())
        elif (node.op == "call_function" and node.target in _SAME_VALUE and node.args
              and node.args[0] in found):
            found[node] = found[node.args[0]]
    return found


def _same_tensor_type(root: fx.Node, x_node: fx.Node) -> bool:
    """The formula's result has x's shape and floating dtype (no broadcast, no promotion)."""
    out, inp = root.meta.get("val"), x_node.meta.get("val")
    if not isinstance(out, torch.Tensor) or not isinstance(inp, torch.Tensor):
        return out is None and inp is None  # a graph without metadata: nothing to compare
    same_dims = [str(d) for d in out.shape] == [str(d) for d in inp.shape]  # SymInts too
    return out.dtype == inp.dtype and inp.dtype.is_floating_point and same_dims


def canonicalize_gelus(gm: fx.GraphModule, scalars: ex.Scalars | None = None) -> list[GeluSite]:
    """Rewrite hand-written GELU formulas into `aten.gelu`; return every site (QuickGELU too).

    QuickGELU is reported with kind `quick` and left as it is: it is a different function.
    """
    graph = gm.graph
    forms = ex.FormBuilder(scalars)
    sites: list[GeluSite] = []
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is GELU:
            source = _builtin_source(node)
            sites.append(GeluSite(node.name, gelu_kind(node), source, module=module_path(node),
                                  called_at="" if source.startswith("nn.GELU")
                                  else called_at(node)))
            continue
        if node.target not in ex.ARITHMETIC:
            continue
        found = match_rule(forms.form(node))
        if found is None:
            continue
        rule, x_node = found
        if not _same_tensor_type(node, x_node):
            continue
        spanned = spanned_nodes(node, x_node)
        source = _formula_source(rule, spanned, node)
        if rule.kind == "quick":
            sites.append(GeluSite(node.name, "quick", source,
                                  action="kept (QuickGELU is a different function)",
                                  module=module_path(node), called_at=called_at(node)))
            continue
        approximate = "tanh" if rule.kind == "tanh" else "none"
        with graph.inserting_before(node):
            new = graph.call_function(GELU, (x_node,), {"approximate": approximate})
        new.meta.update({k: v for k, v in node.meta.items() if k in _META_KEYS})
        node.replace_all_uses_with(new)
        for dead in spanned:  # the formula's own nodes, now unused
            if not dead.users:
                graph.erase_node(dead)
        sites.append(GeluSite(new.name, rule.kind, source,
                              action=f"canonicalized to aten.gelu(approximate={approximate})",
                              module=module_path(node), called_at=called_at(node)))
        changed = True
    if changed:
        graph.lint()
        gm.recompile()
    return sites
