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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from export_gelu.errors import BadInputError
from export_gelu.exporter.feeds.dynamic_dims import (
    axes_named,
    check_onnx_axes,
    check_program_ranges,
    onnx_named_axes,
    program_named_axes,
    program_ranges,
    resolve_flags,
    static_program_refusal,
)
from export_gelu.exporter.feeds.dynamic_plan import DynamicPlan, InputTemplate, np_dtype_name
from export_gelu.flags.dynamic import DimRange, split_named_dims
from export_gelu.onnx_file import read_structure

if TYPE_CHECKING:
    from export_gelu.exporter.loading.loaded import LoadedModel


def _template_from_spec(spec: str, named: dict[int, str]) -> InputTemplate:
    from export_gelu.exporter.inputs.specs import parse_input_spec

    numeric, _ = split_named_dims(spec)
    parts = numeric.split(":")
    if named:  # parse with a placeholder size: the real one comes from the dim's range
        parts[1] = "x".join("1" if i in named else d for i, d in enumerate(parts[1].split("x")))
    parsed = parse_input_spec(":".join(parts))
    dims = tuple(named.get(i, s) for i, s in enumerate(parsed.shape))
    return InputTemplate(parsed.name, np_dtype_name(parsed.dtype), dims, parsed.low, parsed.high)


def _template_from_tensor(name: str, tensor: Any, row: list[int | str]) -> InputTemplate:
    """An example input's template: its dtype and dims, no range (the inputs made at other
    sizes come from generated_inputs, by role; an example's own range is only a hint)."""
    arr = tensor.detach().cpu().numpy()
    return InputTemplate(name, np_dtype_name(arr.dtype), tuple(row))


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


def _program_plan(loaded: LoadedModel, flags: Sequence[DimRange], specs: list[str]) -> DynamicPlan:
    names = loaded.input_names or [f"input_{i}" for i in range(len(loaded.example_inputs or ()))]
    program = loaded.exported
    assert program is not None  # the plan of a loaded ExportedProgram
    named, symbols = program_named_axes(program, names)
    if flags and not symbols:
        raise static_program_refusal(loaded.path, flags)
    plan = DynamicPlan(symbols=symbols)
    plan.dims = resolve_flags(flags, named, torch_model=True)
    allowed = program_ranges(program, symbols)
    check_program_ranges(plan.dims, allowed, loaded.path)
    example = {n: t for n, t in zip(names, loaded.example_inputs or ())}
    given = {d.name for d in plan.dims}
    for sym, name in symbols.items():  # the program's own dynamic dims stay dynamic
        if name in given:
            continue
        axes = axes_named(named, name)
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


def _module_plan(loaded: LoadedModel, flags: Sequence[DimRange], specs: list[str],
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


def _onnx_plan(loaded: LoadedModel, flags: Sequence[DimRange], specs: list[str]) -> DynamicPlan:
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
            templates.append(InputTemplate(name, np_dtype_name(_ONNX_TO_NUMPY[elem]),
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


def plan_dynamic(loaded: LoadedModel, flags: Sequence[DimRange], specs: Sequence[str],
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
