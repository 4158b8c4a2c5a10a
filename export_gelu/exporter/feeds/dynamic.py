"""`--dynamic`: named dims and their ranges, resolved to every input axis that carries them.

Three spellings of the flag, all ending in `=MIN:OPT:MAX`:

- `DIM=MIN:OPT:MAX` ranges every input axis named DIM: an ONNX input's symbolic dim
  (`dim_param`), a dim named in `--input` (`input_ids:batchxseq:int64`), or a dim of an
  ExportedProgram saved dynamic (named `batch` at axis 0, `seq` at axis 1, `dimN` elsewhere).
- `DIM=INPUT:AXIS[,INPUT:AXIS…]=MIN:OPT:MAX` names the axes DIM covers explicitly.
- `INPUT:AXIS=MIN:OPT:MAX` ranges one axis (the TensorRT-style form, given once per input):
  the dim is named as the model names the axis, else by position (batch, seq, dimN).

Each covers the axes the model names alike too, and flags reaching one dim with one range
join it (`resolve_flags`). For a torch module, torch ties the axes no flag names
(dynamic_capture.py).

The result is a `DynamicPlan`: each dim with its range and axes, the `DynamicAxis` list per
input axis (the TensorRT optimization profile and trtexec's shapes), the torch.export
`dynamic_shapes`, and the inputs at MIN, OPT, MAX and one odd size in between, where parity is
checked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from export_gelu.errors import BadInputError
from export_gelu.exporter.feeds.dynamic_axes import DynamicAxis
from export_gelu.flags.dynamic import DimRange, split_named_dims
from export_gelu.flags.dynamic import parse_dynamic_flag as parse_dynamic_flag  # re-exported
from export_gelu.onnx_file import read_structure

#: Names given to an ExportedProgram's dynamic dims by the first axis that carries them.
_AXIS_NAMES = {0: "batch", 1: "seq"}


@dataclass(frozen=True)
class InputTemplate:
    """One model input with its named dims: how to make it at any size of those dims."""

    name: str
    dtype: str  # a key of inputs.DTYPES
    dims: tuple[int | str, ...]  # a str is a named dim
    low: float | None = None
    high: float | None = None

    def spec(self, sizes: dict[str, int]) -> str:
        """The `--input` spec of this input with every named dim at `sizes`."""
        shape = "x".join(str(sizes[d]) if isinstance(d, str) else str(d) for d in self.dims)
        text = f"{self.name}:{shape}:{self.dtype}"
        if self.low is not None and self.high is not None:
            text += f":{self.low:g},{self.high:g}"
        return text


def _np_dtype_name(dtype: Any) -> str:
    """The `--input` dtype word for a numpy dtype (the names inputs.DTYPES uses)."""
    return np.dtype(dtype).name


@dataclass
class DynamicPlan:
    """The dynamic dims of one run, resolved against the model."""

    dims: list[DimRange] = field(default_factory=list)  # resolved: name and axes filled in
    templates: list[InputTemplate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    symbols: dict[str, str] = field(default_factory=dict)  # a program's symbol → dim name
    generated: bool = False  # the feed is made from the templates (no --input was needed)

    def __bool__(self) -> bool:
        return bool(self.dims)

    @property
    def ranged(self) -> list[DimRange]:
        """Dims whose range holds more than one size."""
        return [d for d in self.dims if d.min < d.max]

    def axes(self) -> list[DynamicAxis]:
        """One DynamicAxis per input axis, the TensorRT optimization profile's ranges."""
        return [DynamicAxis(inp, axis, d.min, d.opt, d.max, d.name)
                for d in self.dims for inp, axis in d.axes]

    def sizes(self, which: str) -> dict[str, int]:
        """Every dim at `which`: min, opt, max, or odd (an odd size strictly between)."""
        if which == "odd":
            return {d.name: _odd_between(d) for d in self.dims}
        return {d.name: getattr(d, which) for d in self.dims}

    def points(self) -> list[tuple[str, dict[str, int]]]:
        """(label, sizes) where parity runs: opt first, then min, odd and max; no repeats."""
        seen: list[dict[str, int]] = []
        out = []
        for label in ("opt", "min", "odd", "max"):
            sizes = self.sizes(label)
            if sizes not in seen:
                seen.append(sizes)
                out.append((label, sizes))
        return out

    def specs(self, sizes: dict[str, int]) -> list[str]:
        return [t.spec(sizes) for t in self.templates]

    def free_axes(self) -> set[tuple[str, int]]:
        """Axes torch.export may leave as symbols of their own (`Dim.AUTO`, never made static):
        none here; a model's declared plan names its derived dims' axes (hf_dims.py)."""
        return set()

    def torch_dynamic_shapes(self, input_names: Sequence[str]) -> tuple[Any, ...]:
        """torch.export's `dynamic_shapes`: one Dim per named dim, shared by its axes (capture
        itself uses dynamic_capture.dynamic_shapes, which lets torch tie the other axes)."""
        import torch

        made = {d.name: torch.export.Dim(d.name, min=d.min, max=d.max) for d in self.ranged}
        per_input: dict[str, dict[int, Any]] = {n: {} for n in input_names}
        for d in self.ranged:
            for inp, axis in d.axes:
                per_input[inp][axis] = made[d.name]
        return tuple(per_input[n] or None for n in input_names)

    def to_json(self) -> list[dict[str, Any]]:
        return [{"name": d.name, "min": d.min, "opt": d.opt, "max": d.max,
                 "axes": [f"{i}:{a}" for i, a in d.axes]} for d in self.dims]


def _odd_between(d: DimRange) -> int:
    """An odd size strictly between OPT and MAX (else MIN and OPT), or OPT when none exists."""
    for lo, hi in ((d.opt, d.max), (d.min, d.opt)):
        mid = (lo + hi) // 2
        for cand in (mid | 1, (mid | 1) - 2, (mid | 1) + 2):
            if lo < cand < hi:
                return cand
    return d.opt


# -- what the model names: dims per input axis -------------------------------------------------

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


def program_named_axes(program: Any, names: Sequence[str]
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


def program_ranges(program: Any, symbols: dict[str, str]) -> dict[str, tuple[int, int | None]]:
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


# -- resolving the flags against the model -----------------------------------------------------

def _axes_named(named: dict[str, list[int | str]], dim: str) -> tuple[tuple[str, int], ...]:
    return tuple((inp, i) for inp, row in named.items() for i, d in enumerate(row) if d == dim)


def _known_names(named: dict[str, list[int | str]]) -> str:
    names = sorted({d for row in named.values() for d in row if isinstance(d, str) and d})
    return ", ".join(names) or "none"


def _fixed_axes(f: DimRange, named: dict[str, list[int | str]], torch_model: bool
                ) -> list[tuple[str, int]]:
    """The axes a flag names, checked against the model (exit 2 naming what does not exist)."""
    axes = f.axes or _axes_named(named, f.name)
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
            out += [k for k in _axes_named(named, _model_name(named, key)) if k not in out]
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
                         path: Any) -> None:
    """A range must lie within what the ExportedProgram was exported for."""
    for d in dims:
        lo, hi = allowed.get(d.name, (1, None))
        if d.min < lo or (hi is not None and d.max > hi):
            shown = f"[{lo}, {hi if hi is not None else '∞'}]"
            raise BadInputError(f"{d.label}: {path} was exported with {d.name} in {shown}; "
                                f"{d.min}..{d.max} is outside it (re-export the model with a "
                                "wider Dim, or narrow the range)")


def static_program_refusal(path: Any, flags: Sequence[DimRange]) -> BadInputError:
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


#: Why a dynamic export below opset 18 goes through the dynamo exporter and the down-converter.
DOWNCONVERT_NOTE = ("dynamic dims: exported with the dynamo exporter at opset {opset}, then "
                    "converted down to opset {target} (the TorchScript exporter traces an "
                    "ExportedProgram's sizes as constants: torch.jit.trace does not record "
                    "aten.sym_size)")


def torchscript_dynamic_axes(plan: DynamicPlan) -> dict[str, dict[int, str]] | None:
    """The TorchScript exporter's `dynamic_axes` for the plan's ranged dims."""
    axes: dict[str, dict[int, str]] = {}
    for d in plan.ranged:
        for inp, axis in d.axes:
            axes.setdefault(inp, {})[axis] = d.name
    return axes or None


# -- naming the exported graph's dims ----------------------------------------------------------

def _rename_in(dim: Any, mapping: dict[str, str], pattern: re.Pattern | None) -> None:
    if dim.HasField("dim_param") and pattern is not None:
        dim.dim_param = pattern.sub(lambda m: mapping[m.group(0)], dim.dim_param)


def name_graph_dims(model: onnx.ModelProto, dims: Sequence[DimRange]) -> None:
    """Give every ranged axis of the graph's inputs its dim's name, and rename that dim's old
    symbol (the exporter's `s77`) to it wherever it appears: outputs and value info too."""
    inputs = {vi.name: vi for vi in model.graph.input}
    mapping: dict[str, str] = {}
    for d in dims:
        for inp, axis in d.axes:
            vi = inputs.get(inp)
            if vi is None or axis >= len(vi.type.tensor_type.shape.dim):
                continue
            dim = vi.type.tensor_type.shape.dim[axis]
            if dim.HasField("dim_param") and dim.dim_param and dim.dim_param != d.name:
                mapping[dim.dim_param] = d.name
            if not dim.HasField("dim_value"):
                dim.dim_param = d.name
    if not mapping:
        return
    pattern = re.compile(r"\b(" + "|".join(re.escape(k) for k in sorted(mapping, key=len,
                                                                          reverse=True)) + r")\b")
    for vi in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        for dim in vi.type.tensor_type.shape.dim:
            _rename_in(dim, mapping, pattern)


def _is_named(dim: Any, names: set[str]) -> bool:
    if dim.HasField("dim_value"):
        return True
    return bool(dim.dim_param) and set(re.findall(r"[A-Za-z_]\w*", dim.dim_param)) <= names


def _weights_as_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph without its large weights' bytes: each becomes a graph input of its shape
    (shape inference reads the values of small, shape-like constants only)."""
    from export_gelu.graph import skeleton

    fields = ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
              "uint64_data", "string_data")
    sk = skeleton(model)
    stubs = [t for t in sk.graph.initializer if int(np.prod(t.dims)) > 0
             and not any(len(getattr(t, f)) for f in fields)]
    stub_names = {t.name for t in stubs}
    kept = [t for t in sk.graph.initializer if t.name not in stub_names]
    del sk.graph.initializer[:]
    sk.graph.initializer.extend(kept)
    sk.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                          for t in stubs)
    return sk


def name_output_dims(model: onnx.ModelProto, dims: Sequence[DimRange]) -> str | None:
    """Outputs whose dims the exporter left unnamed (`Reshape552_dim_0`) get them from ONNX
    Runtime's symbolic shape inference, run on the graph without its large weights; returns a
    note when that could not be done."""
    names = {d.name for d in dims}
    if not names or all(_is_named(d, names) for o in model.graph.output
                        for d in o.type.tensor_type.shape.dim):
        return None
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inferred = SymbolicShapeInference.infer_shapes(_weights_as_inputs(model),
                                                       auto_merge=True)
    except Exception as exc:  # noqa: BLE001 - optional help; the graph stays valid without it
        return (f"output dims left as the exporter named them (symbolic shape inference: "
                f"{type(exc).__name__})")
    found = {o.name: o for o in inferred.graph.output}
    for out in model.graph.output:
        new = found.get(out.name)
        if new is None:
            continue
        new_dims = new.type.tensor_type.shape.dim
        old_dims = out.type.tensor_type.shape.dim
        if len(new_dims) != len(old_dims):
            continue
        for old, nd in zip(old_dims, new_dims):
            if not _is_named(old, names) and _is_named(nd, names):
                old.CopyFrom(nd)
    return None


def static_ranged_axes(model: onnx.ModelProto, dims: Sequence[DimRange]) -> list[str]:
    """Ranged input axes the exported graph made static (each `input:axis=size`)."""
    named = onnx_named_axes(model)
    return [f"{inp}:{axis}={named[inp][axis]}" for d in dims if d.min < d.max
            for inp, axis in d.axes if inp in named and axis < len(named[inp])
            and isinstance(size := named[inp][axis], int) and size > 0]


# -- the plan for one run ----------------------------------------------------------------------

def _template_from_spec(spec: str, named: dict[int, str]) -> InputTemplate:
    from export_gelu.exporter.inputs.specs import parse_input_spec

    numeric, _ = split_named_dims(spec)
    parts = numeric.split(":")
    if named:  # parse with a placeholder size: the real one comes from the dim's range
        parts[1] = "x".join("1" if i in named else d for i, d in enumerate(parts[1].split("x")))
    parsed = parse_input_spec(":".join(parts))
    dims = tuple(named.get(i, s) for i, s in enumerate(parsed.shape))
    return InputTemplate(parsed.name, _np_dtype_name(parsed.dtype), dims, parsed.low, parsed.high)


def _template_from_tensor(name: str, tensor: Any, row: list[int | str]) -> InputTemplate:
    """An example input's template: its dtype and dims, no range (the inputs made at other
    sizes come from generated_inputs, by role; an example's own range is only a hint)."""
    arr = tensor.detach().cpu().numpy()
    return InputTemplate(name, _np_dtype_name(arr.dtype), tuple(row))


def with_plan_names(t: InputTemplate, dims: Sequence[DimRange]) -> InputTemplate:
    row = list(t.dims)
    for d in dims:
        for inp, axis in d.axes:
            if inp == t.name and axis < len(row):
                row[axis] = d.name
    return InputTemplate(t.name, t.dtype, tuple(row), t.low, t.high)


def _unranged_names(templates: Sequence[InputTemplate], dims: Sequence[DimRange]) -> list[str]:
    known = {d.name for d in dims}
    return sorted({d for t in templates for d in t.dims if isinstance(d, str) and d not in known})


def _program_plan(loaded: Any, flags: Sequence[DimRange], specs: list[str]) -> DynamicPlan:
    names = loaded.input_names or [f"input_{i}" for i in range(len(loaded.example_inputs or ()))]
    named, symbols = program_named_axes(loaded.exported, names)
    if flags and not symbols:
        raise static_program_refusal(loaded.path, flags)
    plan = DynamicPlan(symbols=symbols)
    plan.dims = resolve_flags(flags, named, torch_model=True)
    allowed = program_ranges(loaded.exported, symbols)
    check_program_ranges(plan.dims, allowed, loaded.path)
    example = {n: t for n, t in zip(names, loaded.example_inputs or ())}
    given = {d.name for d in plan.dims}
    for sym, name in symbols.items():  # the program's own dynamic dims stay dynamic
        if name in given:
            continue
        axes = _axes_named(named, name)
        inp, axis = axes[0]
        opt = int(example[inp].shape[axis]) if inp in example else allowed[name][0]
        lo, hi = allowed.get(name, (1, None))
        if hi is None:
            hi = max(opt, lo)
            plan.notes.append(f"dim {name} ({sym}) has no upper bound in the ExportedProgram; "
                              f"parity and the TensorRT profile stop at {hi} (give --dynamic "
                              f"{name}=MIN:OPT:MAX for another range)")
        plan.dims.append(DimRange(name, lo, min(max(opt, lo), hi), hi, axes))
    if specs:
        plan.templates = [with_plan_names(_template_from_spec(s, split_named_dims(s)[1]),
                                           plan.dims) for s in specs]
    elif loaded.example_inputs is not None:
        plan.templates = [_template_from_tensor(n, t, named.get(n, list(t.shape)))
                          for n, t in example.items()]
    return plan


def _module_plan(loaded: Any, flags: Sequence[DimRange], specs: list[str],
                 npz: Any) -> DynamicPlan:
    plan = DynamicPlan()
    named: dict[str, list[int | str]] = {}
    spec_names: dict[str, dict[int, str]] = {}
    for s in specs:
        _numeric, names = split_named_dims(s)
        spec_names[s] = names
        t = _template_from_spec(s, names)
        named[t.name] = list(t.dims)
    if npz and not specs:
        from export_gelu.exporter.inputs.specs import load_npz

        named = {k: list(v.shape) for k, v in load_npz(npz).items()}
    plan.dims = resolve_flags(flags, named, torch_model=True)
    if specs:
        plan.templates = [with_plan_names(_template_from_spec(s, spec_names[s]), plan.dims)
                          for s in specs]
    return plan


def _onnx_plan(loaded: Any, flags: Sequence[DimRange], specs: list[str]) -> DynamicPlan:
    from export_gelu.exporter.feeds.feeds import onnx_graph_inputs

    model = read_structure(loaded.path)
    named = onnx_named_axes(model)
    plan = DynamicPlan()
    plan.dims = resolve_flags(flags, named, torch_model=False)
    check_onnx_axes(plan.dims, named)
    if specs:
        plan.templates = [with_plan_names(_template_from_spec(s, split_named_dims(s)[1]),
                                           plan.dims) for s in specs]
    else:
        from export_gelu.exporter.feeds.feeds import _ONNX_TO_NUMPY

        ranged = {key: d.name for d in plan.dims for key in d.axes}
        templates, unnamed = [], []
        for name, dims, elem in onnx_graph_inputs(loaded.path):
            if elem not in _ONNX_TO_NUMPY or 0 in dims:
                return DynamicPlan(dims=plan.dims)  # the input resolver explains what to pass
            row: list[int | str] = []
            for axis, d in enumerate(dims):
                if (name, axis) in ranged:
                    row.append(ranged[(name, axis)])
                elif isinstance(d, int) and d > 0:
                    row.append(d)
                else:
                    row.append(1)
                    unnamed.append(f"{name}:{axis}" + (f" ({d})" if isinstance(d, str) else ""))
            templates.append(InputTemplate(name, _np_dtype_name(_ONNX_TO_NUMPY[elem]),
                                           tuple(row)))
        if unnamed or flags:
            plan.templates = templates
            plan.generated = True
        if unnamed:
            plan.notes.append(f"symbolic dims that no --dynamic ranges ({', '.join(unnamed)}) "
                              "were fed at 1 for parity (give --input or --dynamic to choose)")
    return plan


def refuse_oversized_points(plan: DynamicPlan) -> None:
    """Exit 2 naming the `--dynamic` flag (as typed) when an input at one of the sizes parity
    feeds (opt, min, an odd size, max) would hold more elements than any input may."""
    from export_gelu.exporter.inputs.specs import MAX_ELEMENTS

    for label, sizes in plan.points():
        for t in plan.templates:
            shape = [sizes[d] if isinstance(d, str) else d for d in t.dims]
            elements = float(np.prod(shape, dtype=np.float64)) if shape else 1.0
            if elements <= MAX_ELEMENTS:
                continue
            named = [d for d in plan.dims if d.name in t.dims]
            widest = max(named, key=lambda d: sizes[d.name])
            raise BadInputError(
                f"{widest.label}: at its {label} size ({sizes[widest.name]}) input {t.name!r} "
                f"has shape {'x'.join(map(str, shape))}, {elements:.3g} elements, more than the "
                f"{MAX_ELEMENTS} an input may hold (parity runs at min, opt, an odd size and "
                "max); lower the range, or pass --no-verify")


def plan_dynamic(loaded: Any, flags: Sequence[DimRange], specs: Sequence[str],
                 npz: Any = None) -> tuple[DynamicPlan, list[str]]:
    """The run's dynamic dims, and the `--input` specs to feed (named dims at their OPT).

    The specs are returned unchanged when nothing is dynamic; an ExportedProgram saved dynamic
    keeps its own dims (named batch/seq/dimN) with the ranges it was exported with.
    """
    specs = list(specs)
    if loaded.is_onnx:
        plan = _onnx_plan(loaded, flags, specs)
    elif loaded.exported is not None:
        plan = _program_plan(loaded, flags, specs)
    else:
        plan = _module_plan(loaded, flags, specs, npz)
    missing = _unranged_names(plan.templates, plan.dims)
    if missing:
        spec = next(s for s in specs if set(split_named_dims(s)[1].values()) & set(missing))
        raise BadInputError(f"--input {spec!r}: shape {spec.split(':')[1]!r} is not like 1x128, "
                            f"or names dim(s) {', '.join(missing)} that no --dynamic ranges "
                            f"(add --dynamic {missing[0]}=MIN:OPT:MAX)")
    if not plan.templates or npz:
        if plan.ranged and npz:
            plan.notes.append("parity ran on the --inputs data only (one shape); give --input "
                              "specs to check every size of the --dynamic ranges")
        plan.templates = []
        return plan, specs
    if plan.generated or (flags and not specs) or any(split_named_dims(s)[1] for s in specs):
        return plan, plan.specs(plan.sizes("opt"))
    return plan, specs
