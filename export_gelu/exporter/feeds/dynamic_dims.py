"""Which input axes each `--dynamic` dim covers: the axes a model names (an ONNX graph's
`dim_param`s, an ExportedProgram's dynamic dims), flags joined into dims, and each range
checked against what the model allows."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import onnx

from export_gelu.errors import BadInputError
from export_gelu.flags.dynamic import DimRange

if TYPE_CHECKING:
    import torch

#: Names given to an ExportedProgram's dynamic dims by the first axis that carries them.
_AXIS_NAMES = {0: "batch", 1: "seq"}


def onnx_named_axes(model: onnx.ModelProto) -> dict[str, list[int | str]]:
    """Each real graph input's dims: an int, a dim_param, or '' for an unnamed dynamic dim."""
    inits = {i.name for i in model.graph.initializer}
    out: dict[str, list[int | str]] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        out[vi.name] = [d.dim_value if d.HasField("dim_value") else d.dim_param
                        for d in vi.type.tensor_type.shape.dim]
    return out


def program_named_axes(program: torch.export.ExportedProgram, names: Sequence[str]
                       ) -> tuple[dict[str, list[int | str]], dict[str, str]]:
    """An ExportedProgram's user inputs' dims, its symbols renamed (s77 → batch), and the map."""
    import torch

    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"
                    and n.name in set(program.graph_signature.user_inputs)]
    symbols: dict[str, str] = {}
    dims: dict[str, list[int | str]] = {}
    taken: set[str] = set()
    for name, node in zip(names, placeholders):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        row: list[int | str] = []
        for axis, size in enumerate(val.shape):
            if isinstance(size, int):
                row.append(size)
                continue
            sym = str(size.node.expr)
            if sym not in symbols:
                base = _AXIS_NAMES.get(axis, f"dim{axis}")
                new, k = base, 2
                while new in taken:
                    new, k = f"{base}{k}", k + 1
                symbols[sym] = new
                taken.add(new)
            row.append(symbols[sym])
        dims[name] = row
    return dims, symbols


def program_ranges(program: torch.export.ExportedProgram, symbols: dict[str, str]
                   ) -> dict[str, tuple[int, int | None]]:
    """Each named dim's (min, max or None when unbounded) from the program's constraints."""
    out: dict[str, tuple[int, int | None]] = {}
    for sym, vr in program.range_constraints.items():
        name = symbols.get(str(sym))
        if name is None:
            continue
        lower = max(int(vr.lower), 1) if vr.lower.is_finite else 1
        upper = int(vr.upper) if vr.upper.is_finite else None
        out[name] = (lower, upper)
    return out


def axes_named(named: dict[str, list[int | str]], dim: str) -> tuple[tuple[str, int], ...]:
    return tuple((inp, i) for inp, row in named.items() for i, d in enumerate(row) if d == dim)


def _known_names(named: dict[str, list[int | str]]) -> str:
    names = sorted({d for row in named.values() for d in row if isinstance(d, str) and d})
    return ", ".join(names) or "none"


def _fixed_axes(f: DimRange, named: dict[str, list[int | str]], torch_model: bool
                ) -> list[tuple[str, int]]:
    """The axes a flag names, checked against the model (exit 2 naming what does not exist)."""
    axes = f.axes or axes_named(named, f.name)
    if not axes:
        how = ("name it in --input (e.g. input_ids:batchxseq:int64) or map it "
               f"(--dynamic {f.name}=INPUT:AXIS=MIN:OPT:MAX)") if torch_model else \
            f"the graph's input dims are named: {_known_names(named)}"
        raise BadInputError(f"{f.label}: no input axis carries a dim named {f.name!r}; {how}")
    fixed = []
    for inp, axis in axes:
        if inp not in named:
            what = "model" if torch_model else "graph"
            raise BadInputError(f"{f.label}: the {what} has no input {inp!r} (inputs: "
                                f"{', '.join(named) or 'none'})")
        rank = len(named[inp])
        if not -rank <= axis < rank:
            raise BadInputError(f"{f.label}: input {inp!r} has rank {rank}, no axis {axis}")
        fixed.append((inp, axis % rank))
    return fixed


def _model_name(named: dict[str, list[int | str]], key: tuple[str, int]) -> str:
    """The name the model gives an axis ('' when it gives none)."""
    here = named[key[0]][key[1]]
    return here if isinstance(here, str) else ""


def _with_tied(fixed: list[tuple[str, int]], named: dict[str, list[int | str]]
               ) -> list[tuple[str, int]]:
    """`fixed` and every axis the model names like one of them (one symbol in an ONNX graph
    or an ExportedProgram, one name in `--input`: the model ties them)."""
    out = list(fixed)
    for key in fixed:
        if _model_name(named, key):
            out += [k for k in axes_named(named, _model_name(named, key)) if k not in out]
    return out


def _flag_name(f: DimRange, fixed: list[tuple[str, int]], named: dict[str, list[int | str]]
               ) -> tuple[str, bool]:
    """(the dim's name, whether it comes from the flag or the model rather than the axis's
    position): the INPUT:AXIS form takes the model's name for the axis, else batch at axis 0,
    seq at axis 1, dimN elsewhere."""
    if f.name:
        return f.name, True
    here = _model_name(named, fixed[0])
    if here:
        return re.sub(r"\W", "_", here), True
    axis = fixed[0][1]
    return _AXIS_NAMES.get(axis, f"dim{axis}"), False


def _same_range(a: DimRange, b: DimRange) -> bool:
    return (a.min, a.opt, a.max) == (b.min, b.opt, b.max)


def _range_text(d: DimRange) -> str:
    return f"{d.min}:{d.opt}:{d.max}"


def _fresh(name: str, resolved: Sequence[DimRange]) -> str:
    base, k = name, 2
    while any(d.name == name for d in resolved):
        name, k = f"{base}{k}", k + 1
    return name


def resolve_flags(flags: Sequence[DimRange], named: dict[str, list[int | str]],
                  torch_model: bool) -> list[DimRange]:
    """Each flag with its name and axes filled in from the model's named axes.

    A flag covers the axes it names and every axis the model names like them. Flags that
    reach one dim (by its name or a shared axis) with one range become that dim: the INPUT:AXIS
    form given once per input, as TensorRT tools write it. An INPUT:AXIS flag on an axis the
    model does not name, with a range of its own, is a dim of its own (`batch2`). Exit 2 when
    a name, input or axis does not exist, when one dim (or axes the model ties) gets two
    ranges, or when a flag would join two dims.
    """
    resolved: list[DimRange] = []
    for f in flags:
        fixed = _with_tied(_fixed_axes(f, named, torch_model), named)
        name, chosen = _flag_name(f, fixed, named)
        joined = [d for d in resolved if d.name == name or set(d.axes) & set(fixed)]
        if len(joined) > 1:
            raise BadInputError(f"--dynamic {f.flag}: its axes are ranged by "
                                f"{' and '.join(d.label for d in joined)} already")
        join = joined[0] if joined else None
        by_axes = join is not None and bool(set(join.axes) & set(fixed))
        if join is not None and f.name and join.name != f.name:
            raise BadInputError(f"--dynamic {f.flag}: {', '.join(f'{i}:{a}' for i, a in fixed)}"
                                f" is ranged by dim {join.name!r} ({join.label}) already")
        if join is not None and not _same_range(join, f):
            if not by_axes and not chosen:  # an unnamed axis with its own range
                join, name = None, _fresh(name, resolved)
            else:
                what = f"dim {join.name!r}" if f.name and not f.axes else \
                    f"axes the model ties together (dim {join.name!r})"
                raise BadInputError(f"{join.label} and --dynamic {f.flag} give {what} "
                                    f"different ranges ({_range_text(join)} and "
                                    f"{_range_text(f)}); give them one range")
        if join is not None:  # the same dim and range again: its axes join the dim's
            axes = tuple(dict.fromkeys([*join.axes, *fixed]))
            flag = join.flag if f.flag == join.flag else f"{join.flag} and --dynamic {f.flag}"
            resolved[resolved.index(join)] = DimRange(join.name, f.min, f.opt, f.max, axes,
                                                      flag)
        else:
            resolved.append(DimRange(name, f.min, f.opt, f.max, tuple(fixed), f.flag))
    return resolved


def check_onnx_axes(dims: Sequence[DimRange], named: dict[str, list[int | str]]) -> None:
    """An ONNX input's static axis cannot be ranged (its shape is fixed in the graph)."""
    for d in dims:
        for inp, axis in d.axes:
            here = named[inp][axis]
            if isinstance(here, int) and here > 0:
                raise BadInputError(f"{d.label}: axis {axis} of {inp!r} is static ({here}) in "
                                    "the graph; only a symbolic dim can be ranged (export the "
                                    "model with that axis dynamic)")


def check_program_ranges(dims: Sequence[DimRange], allowed: dict[str, tuple[int, int | None]],
                         path: object) -> None:
    """A range must lie within what the ExportedProgram was exported for."""
    for d in dims:
        lo, hi = allowed.get(d.name, (1, None))
        if d.min < lo or (hi is not None and d.max > hi):
            shown = f"[{lo}, {hi if hi is not None else '∞'}]"
            raise BadInputError(f"{d.label}: {path} was exported with {d.name} in {shown}; "
                                f"{d.min}..{d.max} is outside it (re-export the model with a "
                                "wider Dim, or narrow the range)")


def static_program_refusal(path: object, flags: Sequence[DimRange]) -> BadInputError:
    shown = " ".join(f"--dynamic {f.flag}" for f in flags)
    return BadInputError(f"{shown}: {path} is an ExportedProgram saved with static shapes, "
                         "which are baked into its graph; save it with torch.export.export("
                         "..., dynamic_shapes=...) or give the nn.Module (a pickle, or a "
                         "state_dict with --model-factory) and name the dims in --input")


def constraint_violation(exc: BaseException, dims: Sequence[DimRange]) -> BadInputError | None:
    """torch.export's constraint violation (a range the model does not allow) in one line."""
    text = str(exc)
    if "Constraints violated" not in text and "specialized" not in text:
        return None
    lines = [ln.strip(" -") for ln in text.splitlines()]
    why = next((ln for ln in lines if ln.startswith("Not all values")
                or "specialized" in ln), lines[0])
    fixes = [ln.strip() for ln in lines if re.match(r"^\w+ = (Dim\(|\d)", ln.strip())]
    hint = f" (torch suggests: {'; '.join(fixes)})" if fixes else ""
    flags = " ".join(d.label for d in dims) or "--dynamic"
    return BadInputError(f"{flags}: the model does not allow this range: {why}{hint}")
