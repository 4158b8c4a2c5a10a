"""torch.export with the `--dynamic` dims: torch finds the axes the flags left out.

The flags need not name every input that shares a dim. Each axis no flag covers whose size at
capture equals a ranged dim's OPT is given `Dim.AUTO`: torch ties it to that dim where the
model makes them equal (BERT's `token_type_ids` with `input_ids`), keeps it static where the
model fixes it, and makes it a symbol of its own where it is independent; such an axis is
captured again as static (it merely had the same size). Axes torch ties end up in the plan's
dim (its TensorRT profile, the graph's dim names, the inputs made at every shape).

Two dims torch says must be equal become one when their ranges agree (the INPUT:AXIS form
given per input); with different ranges the run stops (exit 2) naming both flags.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from export_gelu.errors import BadInputError
from export_gelu.exporter.feeds.dynamic import with_plan_names
from export_gelu.exporter.feeds.dynamic_dims import constraint_violation
from export_gelu.exporter.feeds.dynamic_plan import DynamicPlan
from export_gelu.flags.dynamic import DimRange

if TYPE_CHECKING:
    import torch

    from export_gelu.exporter.torch_values import AxisDims

#: Captures tried at most: the first, one after merging tied dims, one with loose axes static.
MAX_TRIES = 4
_EQUAL = re.compile(r"The values of (\w+) = .* and (\w+) = .* must always be equal")
_FIX_EQUAL = re.compile(r"^\s*(\w+) = (\w+)\s*$")


def dynamic_shapes(plan: DynamicPlan, shapes: Mapping[str, Sequence[int]],
                   static: set[tuple[str, int]] | frozenset = frozenset()
                   ) -> tuple[AxisDims, ...]:
    """torch.export's `dynamic_shapes`, one entry per input of `shapes` (feed order): a Dim per
    ranged dim shared by its axes, `Dim.AUTO` on every other axis whose size is a ranged dim's
    OPT (except `static` ones and sizes 0 and 1, which torch always fixes)."""
    import torch

    made = {d.name: torch.export.Dim(d.name, min=d.min, max=d.max) for d in plan.ranged}
    opts = {d.opt for d in plan.ranged if d.opt > 1}
    per_input: dict[str, dict[int, object]] = {n: {} for n in shapes}
    for d in plan.ranged:
        for inp, axis in d.axes:
            per_input[inp][axis] = made[d.name]
    for name, shape in shapes.items():
        for axis, size in enumerate(shape):
            if axis not in per_input[name] and size in opts and (name, axis) not in static:
                per_input[name][axis] = torch.export.Dim.AUTO
    for name, axis in plan.free_axes():
        if name in per_input:
            per_input[name][axis] = torch.export.Dim.AUTO
    return tuple(per_input[n] or None for n in shapes)


def _auto_in(plan: DynamicPlan, names: Sequence[str], spec: Sequence[AxisDims]
             ) -> set[tuple[str, int]]:
    """The axes `spec` gives `Dim.AUTO`, but the plan's free ones (always left to torch)."""
    import torch

    return {(n, a) for n, s in zip(names, spec) if s for a, v in s.items()
            if v is torch.export.Dim.AUTO} - plan.free_axes()


def auto_axes(plan: DynamicPlan, shapes: Mapping[str, Sequence[int]]) -> set[tuple[str, int]]:
    """The axes `dynamic_shapes` gives `Dim.AUTO` because their size is a ranged dim's OPT."""
    return _auto_in(plan, list(shapes), dynamic_shapes(plan, shapes))


def _symbols(program: torch.export.ExportedProgram, names: Sequence[str]
             ) -> dict[tuple[str, int], str]:
    """(input, axis) → the symbol torch gave it, for every symbolic axis of the user inputs."""
    import torch

    user = set(program.graph_signature.user_inputs)
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder" and n.name in user]
    out: dict[tuple[str, int], str] = {}
    for name, node in zip(names, placeholders):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for axis, size in enumerate(val.shape):
            if not isinstance(size, int):
                out[(name, axis)] = str(size.node.expr)
    return out


def _dim_symbols(plan: DynamicPlan, symbols: dict[tuple[str, int], str]) -> dict[str, str]:
    """A ranged dim's symbol (from the first of its axes torch made symbolic) → its name."""
    out: dict[str, str] = {}
    for d in plan.ranged:
        for key in d.axes:
            if key in symbols:
                out.setdefault(symbols[key], d.name)
                break
    return out


def loose_axes(plan: DynamicPlan, program: torch.export.ExportedProgram, names: Sequence[str],
               spec: Sequence[AxisDims]) -> set[tuple[str, int]]:
    """`Dim.AUTO` axes torch made symbols of their own (not one of the plan's dims)."""
    symbols = _symbols(program, names)
    mine = _dim_symbols(plan, symbols)
    return {key for key in _auto_in(plan, names, spec)
            if key in symbols and symbols[key] not in mine}


def adopt_ties(plan: DynamicPlan, program: torch.export.ExportedProgram,
               names: Sequence[str]) -> list[str]:
    """Add to each ranged dim the axes torch gave its symbol; returns them (`input:axis`)."""
    symbols = _symbols(program, names)
    mine = _dim_symbols(plan, symbols)
    added = []
    for i, d in enumerate(plan.dims):
        extra = [k for k, sym in symbols.items() if mine.get(sym) == d.name and k not in d.axes]
        if extra:
            plan.dims[i] = DimRange(d.name, d.min, d.opt, d.max, (*d.axes, *extra), d.flag)
            added += [f"{inp}:{axis}" for inp, axis in extra]
    if added:
        plan.templates = [with_plan_names(t, plan.dims) for t in plan.templates]
    return added


def _tied_pairs(exc: BaseException) -> list[tuple[str, str]]:
    """(a, b) for each pair of dims torch's constraint violation says must be equal."""
    text = str(exc)
    if "Constraints violated" not in text:
        return []
    pairs = [(m.group(1), m.group(2)) for m in _EQUAL.finditer(text)]
    pairs += [(m.group(1), m.group(2)) for ln in text.splitlines()
              if (m := _FIX_EQUAL.match(ln))]
    return list(dict.fromkeys(pairs))


def merge_tied(plan: DynamicPlan, exc: BaseException) -> bool:
    """Merge dims torch says must be equal when their ranges agree; exit 2 naming both flags
    when they do not. False when `exc` names no such pair of the plan's dims."""
    by_name = {d.name: d for d in plan.dims}
    order = [d.name for d in plan.dims]
    pairs = [(by_name[a], by_name[b]) for a, b in (sorted(p, key=order.index)
                                                   for p in _tied_pairs(exc)
                                                   if set(p) <= set(by_name) and p[0] != p[1])]
    if not pairs:
        return False
    for a, b in pairs:
        if (a.min, a.opt, a.max) != (b.min, b.opt, b.max):
            raise BadInputError(
                f"{a.label} and {b.label} range axes the model ties together "
                f"({', '.join(f'{i}:{x}' for i, x in (*a.axes, *b.axes))} must be equal) with "
                f"different ranges ({a.min}:{a.opt}:{a.max} and {b.min}:{b.opt}:{b.max}); "
                "give them one range")
    for a, b in pairs:
        keep = next((d for d in plan.dims if d.name == a.name), None)
        gone = next((d for d in plan.dims if d.name == b.name), None)
        if keep is None or gone is None:
            continue
        flag = " and --dynamic ".join(f for f in (keep.flag, gone.flag) if f)
        merged = DimRange(keep.name, keep.min, keep.opt, keep.max, (*keep.axes, *gone.axes),
                          flag)
        plan.dims = [merged if d is keep else d for d in plan.dims if d is not gone]
    plan.templates = [with_plan_names(t, plan.dims) for t in plan.templates]
    return True


def export_dynamic(plan: DynamicPlan, shapes: Mapping[str, Sequence[int]],
                   export: Callable[[tuple[AxisDims, ...]], torch.export.ExportedProgram],
                   captured: Callable[[tuple[AxisDims, ...]], bool] | None = None
                   ) -> torch.export.ExportedProgram:
    """`export(dynamic_shapes)` (torch.export.export on the model) with the plan's dims, torch
    left to tie the axes the flags did not name; the plan gains those axes. A range the model
    does not allow is bad input (exit 2, in one line).

    `captured(spec)` says a program for `spec` is at hand already (a folder graph's dim probe,
    hf/probed_capture.py). When it is for the spec with every `Dim.AUTO` axis static, that
    capture proved no axis must equal a ranged dim (an equality would have fixed the dim: the
    probe's capture would have failed), so the first try's AUTO axes could only come back as
    symbols of their own, captured again static: the loop starts there."""
    names = list(shapes)
    static: set[tuple[str, int]] = set()
    if captured is not None:
        auto = auto_axes(plan, shapes)
        if auto and captured(dynamic_shapes(plan, shapes, auto)):
            static = auto
    for _ in range(MAX_TRIES):
        spec = dynamic_shapes(plan, shapes, static)
        try:
            program = export(spec)
        except Exception as exc:  # noqa: BLE001 - only torch's constraint report is handled
            if merge_tied(plan, exc):
                continue
            refused = constraint_violation(exc, plan.ranged)
            if refused is not None:
                raise refused from exc
            raise
        loose = loose_axes(plan, program, names, spec)
        if not loose:
            adopt_ties(plan, program, names)
            return program
        static |= loose
    raise BadInputError(f"{' '.join(d.label for d in plan.ranged)}: torch.export did not "
                        f"settle which axes are dynamic after {MAX_TRIES} captures")
