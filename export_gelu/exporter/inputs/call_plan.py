"""How a model is called with a named feed: which inputs go by position, which by keyword.

Encoder-decoders (T5, BART, Whisper) and most Hugging Face models are called as
`model(input_ids=..., decoder_input_ids=...)`. An ExportedProgram records that in its input
treespec (`(args, kwargs)`); for an nn.Module or a TorchScript module, inputs whose names are
all parameters of `forward()` are passed by keyword, in the order `forward()` declares them.
Every caller (capture, both exporters, the PyTorch parity runner, calibration) splits the
feed with the same plan, so the model sees its inputs exactly as its author wrote them.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from export_gelu.exporter.torch_compat import tree_children

if TYPE_CHECKING:
    import torch
    from torch.utils._pytree import TreeSpec

    from export_gelu.exporter.torch_values import PyTree

T = TypeVar("T")


@dataclass(frozen=True)
class CallPlan:
    """`positional`: feed names passed in order; `keyword`: (feed name, parameter) pairs;
    `fixed`: (parameter, value) pairs passed by keyword on every call, not fed (an
    ExportedProgram's keyword arguments saved as `None`). `tree` (an ExportedProgram's input
    treespec) with `leaves` ((feed name, None) or (None, constant) per leaf) rebuilds a call
    whose constants sit anywhere (a positional bool, a dict of Nones); `positional` then
    lists the fed names in leaf order."""

    positional: tuple[str, ...] = ()
    keyword: tuple[tuple[str, str], ...] = ()
    fixed: tuple[tuple[str, PyTree], ...] = ()
    tree: TreeSpec | None = None
    leaves: tuple[tuple[str | None, PyTree], ...] = ()

    @property
    def uses_keywords(self) -> bool:
        return bool(self.keyword or self.fixed or self.tree is not None)

    def split(self, named: Mapping[str, T]) -> tuple[tuple[T, ...], dict[str, T]]:
        """(args, kwargs) for a call, from values keyed by feed name."""
        if self.tree is not None:
            from torch.utils._pytree import tree_unflatten

            values = [named[n] if n is not None else const for n, const in self.leaves]
            args, kwargs = tree_unflatten(values, self.tree)
            return tuple(args), dict(kwargs)
        kwargs = {param: named[n] for n, param in self.keyword}
        kwargs.update(self.fixed)
        return tuple(named[n] for n in self.positional), kwargs

    def split_values(self, values: tuple[T, ...]) -> tuple[tuple[T, ...], dict[str, T]]:
        """(args, kwargs) from values in feed order (positional first, then keyword)."""
        names = list(self.positional) + [n for n, _ in self.keyword]
        return self.split(dict(zip(names, values)))

    def describe(self) -> str:
        if self.tree is not None:
            return ", ".join(n if n is not None else repr(c) for n, c in self.leaves)
        return ", ".join([*self.positional, *(f"{p}=" for _n, p in self.keyword),
                          *(f"{p}={v!r}" for p, v in self.fixed)])


def _forward_params(module: torch.nn.Module) -> list[tuple[str, bool]] | None:
    """(name, keyword-only) of `forward()`'s parameters, or None when they cannot be read."""
    import torch

    try:
        if isinstance(module, torch.jit.ScriptModule):
            schema = getattr(module.forward, "schema", None)  # a ScriptMethod's arguments
            if schema is None:
                return None
            return [(a.name, bool(a.kwarg_only)) for a in schema.arguments[1:]]
        params = inspect.signature(module.forward).parameters.values()
    except Exception:  # noqa: BLE001 - builtin or exotic forward: cannot tell
        return None
    return [(p.name, p.kind is p.KEYWORD_ONLY) for p in params
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def keyword_order(module: torch.nn.Module, names: list[str]) -> list[str] | None:
    """`names` in `forward()`'s order when every one names a parameter and passing them by
    position would not do (a gap before one, a different order, a keyword-only one);
    None when the names should go by position."""
    params = _forward_params(module)
    if not params or not names:
        return None
    order = [p for p, _ko in params]
    if any(n not in order for n in names):
        return None
    ordered = sorted(names, key=order.index)
    by_position = ordered == names and order[:len(names)] == names and \
        not any(ko for p, ko in params if p in names)
    return None if by_position else ordered


def missing_required(module: torch.nn.Module, names: list[str]) -> list[str]:
    """`forward()` parameters without a default that `names` leaves out (nn.Module only)."""
    try:
        params = inspect.signature(module.forward).parameters.values()
    except Exception:  # noqa: BLE001 - TorchScript or exotic: the call will tell
        return []
    return [p.name for p in params if p.default is p.empty and p.name not in names
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def plan_for_program(program: torch.export.ExportedProgram, names: list[str]) -> CallPlan:
    """An ExportedProgram's plan: its input treespec's positional count and kwarg keys."""
    spec = program.call_spec.in_spec
    if spec is None or len(tree_children(spec)) != 2:
        return CallPlan(tuple(names))
    args_spec, kwargs_spec = tree_children(spec)
    tree = _tree_plan(program, spec, names)
    if tree is not None:
        return tree
    keys = list(kwargs_spec.context or [])
    n_args = args_spec.num_leaves
    leaf_kwargs = all(c.is_leaf() for c in tree_children(kwargs_spec))
    fixed = _fixed_kwargs(program, n_args, keys)
    fed = [k for k in keys if k not in dict(fixed)]
    if not keys or not leaf_kwargs or n_args + len(fed) != len(names):
        return CallPlan(tuple(names))
    return CallPlan(tuple(names[:n_args]), tuple(zip(names[n_args:], fed)), tuple(fixed))


def _user_leaves(program: torch.export.ExportedProgram
                 ) -> list[tuple[str | None, PyTree]] | None:
    """(name, None) for each fed user input of `program`, (None, value) for each constant
    one, in its input treespec's leaf order; None when the signature cannot be read."""
    from torch.export.graph_signature import ConstantArgument, InputKind

    try:
        specs = [s for s in program.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]
    except Exception:  # noqa: BLE001 - an odd signature
        return None
    return [(None, s.arg.value) if isinstance(s.arg, ConstantArgument) else (s.arg.name, None)
            for s in specs]


def _tree_plan(program: torch.export.ExportedProgram, spec: TreeSpec, names: list[str]
               ) -> CallPlan | None:
    """A plan rebuilding the saved call's structure, when `program` was captured with a
    constant (bool, int, None) that is positional or nested in a container; else None."""
    leaves = _user_leaves(program)
    if leaves is None or len(leaves) != spec.num_leaves:
        return None
    fed = [n for n, _c in leaves if n is not None]
    if fed != list(names) or len(fed) == len(leaves):
        return None
    args_spec, kwargs_spec = tree_children(spec)
    nested = [c for c in tree_children(kwargs_spec) if not c.is_leaf()]
    positional_const = any(n is None for n, _c in leaves[:args_spec.num_leaves])
    if not nested and not positional_const:
        return None  # the flat plan (keywords and `fixed`) says it
    return CallPlan(tuple(fed), tree=spec, leaves=tuple(leaves))


def example_tensors(program: torch.export.ExportedProgram, args: Sequence[PyTree] | None,
                    kwargs: Mapping[str, PyTree] | None) -> tuple[torch.Tensor, ...] | None:
    """The tensors of a saved call `(args, kwargs)` that `program` is fed, in its user-input
    order (constants, which the program was captured with, are left out); None when the call
    does not match the program's inputs or a fed leaf is not a tensor."""
    import torch
    from torch.utils._pytree import tree_flatten

    leaves = _user_leaves(program)
    values, _spec = tree_flatten((tuple(args or ()), dict(kwargs or {})))
    if leaves is None or len(values) != len(leaves):
        return None
    fed = tuple(v for v, (n, _c) in zip(values, leaves) if n is not None)
    tensors = tuple(v for v in fed if isinstance(v, torch.Tensor))
    return tensors if tensors and len(tensors) == len(fed) else None


def _fixed_kwargs(program: torch.export.ExportedProgram, n_args: int, keys: list[str]
                  ) -> list[tuple[str, PyTree]]:
    """The keyword arguments a program was captured with as constants, not tensors (None,
    a bool, an int): (key, the value it was captured with)."""
    leaves = _user_leaves(program)
    if leaves is None or len(leaves) != n_args + len(keys):
        return []
    return [(k, const) for k, (name, const) in zip(keys, leaves[n_args:]) if name is None]


def plan_for(loaded: object, names: list[str]) -> CallPlan:
    """The plan for a loaded model (loading/loaded.py: LoadedModel) and a feed's names (in
    feed order)."""
    program = getattr(loaded, "exported", None)
    if program is not None:
        return plan_for_program(program, names)
    module = getattr(loaded, "module", None)
    constants = tuple(getattr(loaded, "call_constants", ()) or ())
    if module is None:
        return CallPlan(tuple(names), fixed=constants)
    ordered = keyword_order(module, names)
    if ordered is None:
        return CallPlan(tuple(names), fixed=constants)
    return CallPlan((), tuple((n, n) for n in ordered), constants)


def ordered_feed(plan: CallPlan, feed: Mapping[str, T]) -> OrderedDict[str, T]:
    """The feed in the plan's order: positional names, then keyword names."""
    names = list(plan.positional) + [n for n, _ in plan.keyword]
    return OrderedDict((n, feed[n]) for n in names)


def call(module: Callable[..., PyTree], plan: CallPlan, values: tuple[PyTree, ...]) -> PyTree:
    """`module(*args, **kwargs)` with `values` in feed order."""
    args, kwargs = plan.split_values(values)
    return module(*args, **kwargs)


def positional_module(inner: torch.nn.Module, plan: CallPlan) -> torch.nn.Module:
    """An nn.Module called by position that calls `inner` as the plan says (the TorchScript
    exporter and TS2EPConverter trace positional inputs only)."""
    import torch

    class PositionalCall(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *values: PyTree) -> PyTree:
            return call(self.inner, plan, values)

    return PositionalCall()
