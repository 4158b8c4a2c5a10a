"""The pieces the input resolver (check/inputs/input_resolver.py) picks a run's inputs from: arrays
made by role at `--input` specs or at an ONNX graph's shapes, a `.npz`, the model's own
examples; and the check of a feed against what the model declares before anything is
exported: an ONNX graph's input names, dtypes and fixed dimensions; an ExportedProgram's
input count, dtypes and static dimensions; a module's `forward()` arity.
"""

from __future__ import annotations

import inspect
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from export_gelu.errors import BadInputError
from export_gelu.exporter.inputs.generated import (
    GeneratedFeed,
    ModelHints,
    generate_inputs,
    hints_for,
)
from export_gelu.exporter.inputs.specs import (
    MAX_ELEMENTS,
    SPEC_HELP,
    InputSpec,
    load_npz,
    parse_input_spec,
)
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.onnx_file import read_structure
from export_gelu.shown import shown

if TYPE_CHECKING:
    import torch

_ONNX_TO_NUMPY: dict[int, type] = {
    onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.BOOL: np.bool_}


def onnx_graph_inputs(path: Path) -> list[tuple[str, list[int | str], int]]:
    """(name, dims, elem_type) of an ONNX file's real inputs (initializers excluded)."""
    model = read_structure(path)
    inits = {i.name for i in model.graph.initializer}
    found = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims: list[int | str] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                                 for d in tt.shape.dim]
        found.append((vi.name, dims, tt.elem_type))
    return found


def _shape_text(dims: Sequence[object]) -> str:
    return "x".join(str(d) for d in dims) or "scalar"


def _feed_from_onnx(path: Path, hints: ModelHints) -> OrderedDict[str, np.ndarray]:
    """Generated inputs at the graph's fixed input shapes (exit 2 when a dim is symbolic)."""
    requests = []
    for name, dims, elem in onnx_graph_inputs(path):
        if elem not in _ONNX_TO_NUMPY:
            kind = onnx.TensorProto.DataType.Name(elem) if elem else "no tensor type"
            raise BadInputError(f"{path}: input {name!r} is {kind}, which random inputs are "
                                "not made for; pass --inputs FILE.npz")
        shape = tuple(d for d in dims if isinstance(d, int) and d > 0)
        if len(shape) != len(dims):
            raise BadInputError(
                f"{path}: input {name!r} has shape {_shape_text(dims)} with symbolic or zero "
                f"dimensions; pass --input {SPEC_HELP}"
            )
        if float(np.prod(shape, dtype=np.float64)) > MAX_ELEMENTS:
            raise BadInputError(f"{path}: input {name!r} declares shape {_shape_text(dims)}, "
                                f"more than the {MAX_ELEMENTS} elements allowed; pass --input")
        requests.append(InputSpec(name, shape, np.dtype(_ONNX_TO_NUMPY[elem])))
    return generate_inputs(requests, hints)


def _check_against_onnx(path: Path, feed: OrderedDict[str, np.ndarray]
                        ) -> OrderedDict[str, np.ndarray]:
    """The feed in the graph's input order; names, dtypes and fixed dims must match."""
    declared = onnx_graph_inputs(path)
    expected = [n for n, _d, _e in declared]
    missing = [n for n in expected if n not in feed]
    if missing:
        raise BadInputError(f"{path}: no input given for {', '.join(missing)} "
                            f"(the graph takes {', '.join(expected)})")
    extra = [n for n in feed if n not in expected]
    if extra:
        raise BadInputError(f"{path}: the graph has no input named {', '.join(extra)} "
                            f"(it takes {', '.join(expected)})")
    for name, dims, elem in declared:
        arr = feed[name]
        want = _ONNX_TO_NUMPY.get(elem)
        if want is not None and arr.dtype != np.dtype(want):
            raise BadInputError(f"{path}: input {name!r} is {np.dtype(want).name} in the graph, "
                                f"but {arr.dtype.name} was given")
        fixed_ok = len(dims) == arr.ndim and all(
            not isinstance(d, int) or d <= 0 or d == s for d, s in zip(dims, arr.shape))
        if dims and not fixed_ok:
            raise BadInputError(f"{path}: input {name!r} has shape {_shape_text(dims)} in the "
                                f"graph, but {_shape_text(list(arr.shape))} was given")
    return OrderedDict((n, feed[n]) for n in expected)


def _program_inputs(loaded: LoadedModel) -> list[tuple[str, object]]:
    """(name, fake tensor) of an ExportedProgram's user inputs."""
    program = loaded.exported
    if program is None:
        return []
    user = set(program.graph_signature.user_inputs)
    return [(n.name, n.meta.get("val")) for n in program.graph.nodes
            if n.op == "placeholder" and n.name in user]


def _check_against_program(loaded: LoadedModel, feed: OrderedDict[str, np.ndarray]) -> None:
    import torch

    declared = _program_inputs(loaded)
    if len(declared) != len(feed):
        raise BadInputError(f"{loaded.path}: the ExportedProgram takes {len(declared)} input(s) "
                            f"({', '.join(n for n, _ in declared)}), {len(feed)} given")
    for (name, val), (given, arr) in zip(declared, feed.items()):
        if not isinstance(val, torch.Tensor):
            continue
        want = torch.empty((), dtype=val.dtype).numpy().dtype if val.dtype != torch.bfloat16 \
            else None
        if want is not None and arr.dtype != want:
            raise BadInputError(f"{loaded.path}: input {name!r} is {want.name} in the "
                                f"ExportedProgram, but {arr.dtype.name} was given ({given!r})")
        static = [d if isinstance(d, int) else None for d in val.shape]
        if len(static) != arr.ndim or any(d is not None and d != s
                                          for d, s in zip(static, arr.shape)):
            shown = _shape_text([d if d is not None else "?" for d in static])
            raise BadInputError(f"{loaded.path}: input {name!r} was exported with shape {shown}"
                                f", but {_shape_text(list(arr.shape))} was given ({given!r}); "
                                "an ExportedProgram only takes the shapes it was exported for")


def forward_arity(module: torch.nn.Module) -> tuple[int, int | None] | None:
    """(required, maximum or None if unbounded) positional inputs of `forward`, if knowable."""
    import torch

    try:
        if isinstance(module, torch.jit.ScriptModule):
            schema = getattr(module.forward, "schema", None)  # a ScriptMethod's arguments
            if schema is None:
                return None
            args = schema.arguments[1:]
            required = sum(1 for a in args if not a.has_default_value())
            return required, len(args)
        params = list(inspect.signature(module.forward).parameters.values())
    except Exception:  # noqa: BLE001 - builtin or exotic forward: cannot tell
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return sum(1 for p in params if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD
                   ), None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = sum(1 for p in positional if p.default is p.empty)
    return required, len(positional)


def _check_against_module(loaded: LoadedModel, feed: OrderedDict[str, np.ndarray]) -> None:
    from export_gelu.exporter.inputs.call_plan import keyword_order, missing_required

    module = loaded.module
    if module is None:
        return
    if keyword_order(module, list(feed)) is not None:  # passed by keyword
        missing = missing_required(module, list(feed))
        if missing:
            raise BadInputError(f"{loaded.path}: forward() needs {', '.join(missing)}, which "
                                f"no --input names (given: {', '.join(feed)})")
        return
    arity = forward_arity(module)
    if arity is None:
        return
    required, maximum = arity
    if len(feed) < required or (maximum is not None and len(feed) > maximum):
        want = str(required) if maximum == required else \
            f"{required} to {maximum if maximum is not None else 'any'}"
        raise BadInputError(f"{loaded.path}: forward() takes {want} input(s), {len(feed)} given "
                            f"({', '.join(feed)}); pass one --input per argument, in order, "
                            "or name each after its forward() parameter")


def spec_feed(loaded: LoadedModel, specs: Sequence[str]) -> OrderedDict[str, np.ndarray]:
    """Inputs made by role at `--input` specs (a float64 model's untyped floats in float64)."""
    parsed = [parse_input_spec(s) for s in specs]
    wide = _model_float(loaded)
    if wide is not None:  # a float64 model: untyped float inputs in float64
        parsed = [replace(p, dtype=wide) if p.dtype.kind == "f" and len(s.split(":")) < 3
                  else p for p, s in zip(parsed, specs)]
    return generate_inputs(parsed, hints_for(loaded))


#: Names that say only a position: np.savez's for arrays passed without one (`np.savez(path,
#: a, b)`: arr_0, arr_1) and export-gelu's for inputs it knows no name of (input_0, input_1).
_POSITION_NAME = re.compile(r"(?:arr|input)_(\d+)")


def _forward_names(module: torch.nn.Module) -> list[str] | None:
    """The names `forward()` takes its inputs by (TorchScript's schema, or the signature
    without `self`); None where they cannot be known or any number is taken (`*args`)."""
    import torch

    try:
        if isinstance(module, torch.jit.ScriptModule):
            schema = getattr(module.forward, "schema", None)  # a ScriptMethod's arguments
            return [a.name for a in schema.arguments[1:]] if schema is not None else None
        params = list(inspect.signature(module.forward).parameters.values())
    except Exception:  # noqa: BLE001 - builtin or exotic forward: cannot tell
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return [p.name for p in params if p.kind is not p.VAR_KEYWORD]


def model_input_names(loaded: LoadedModel) -> list[str] | None:
    """The names a model takes its inputs by: an ONNX graph's inputs, an ExportedProgram's
    user inputs, a module's `forward()` parameters; None where it names none."""
    if loaded.is_onnx:
        return [n for n, _d, _e in onnx_graph_inputs(loaded.path)]
    if loaded.exported is not None:
        return [n for n, _val in _program_inputs(loaded)]
    return _forward_names(loaded.module) if loaded.module is not None else None


def by_name(loaded: LoadedModel, feed: OrderedDict[str, np.ndarray], npz: object
            ) -> OrderedDict[str, np.ndarray]:
    """`--inputs FILE.npz`'s arrays matched to the model's inputs by name (docs/cli.md): in
    the model's order when every array names one of its inputs; taken in order only when
    the arrays' names say only a position (np.savez's `arr_0`, `arr_1`, … for arrays saved
    without names; export-gelu's `input_0`, `input_1`, …) or the model names none; else exit
    2 listing both sets of names."""
    names = model_input_names(loaded)
    given = list(feed)
    if names is None or loaded.is_onnx:  # an ONNX graph's are matched by _check_against_onnx
        return feed
    if set(given) <= set(names):
        return OrderedDict((n, feed[n]) for n in names if n in feed)
    positions = [m.group(1) if (m := _POSITION_NAME.fullmatch(n)) else None for n in given]
    if positions == [str(i) for i in range(len(given))]:
        return feed
    raise BadInputError(
        f"--inputs {npz}: its arrays ({', '.join(shown(n, 60) for n in given)}) are not named "
        f"as the model's inputs ({', '.join(shown(n, 60) for n in names) or 'none'}); name "
        "each array after its input (np.savez(path, NAME=array)), or by position (arr_0, "
        "arr_1, … as np.savez(path, a, b) names them, taken in order)")


def npz_feed(loaded: LoadedModel | None, npz: str | Path) -> OrderedDict[str, np.ndarray]:
    """The arrays of `--inputs FILE.npz`, matched to the model's inputs by name (`by_name`);
    float64 ones refused for a float32 torch model."""
    feed: OrderedDict[str, np.ndarray] = OrderedDict(load_npz(npz))
    if loaded is not None:
        feed = by_name(loaded, feed, npz)
    if loaded is None or loaded.is_onnx or _model_float(loaded) is not None:
        return feed
    wide = [n for n, a in feed.items() if a.dtype == np.float64]
    if wide:
        raise BadInputError(
            f"{npz}: {', '.join(wide)} float64, but the model computes in float32 (np.savez "
            "keeps float64 by default); save them as float32: x.astype(np.float32)")
    return feed


def example_feed(loaded: LoadedModel) -> OrderedDict[str, np.ndarray] | None:
    """The model's own example inputs as arrays (None when it carries none)."""
    if loaded.example_inputs is None:
        return None
    names = loaded.input_names or [f"input_{i}" for i in range(len(loaded.example_inputs))]
    return OrderedDict((n, t.detach().cpu().numpy()) for n, t in
                       zip(names, loaded.example_inputs))


def graph_feed(loaded: LoadedModel) -> OrderedDict[str, np.ndarray]:
    """Inputs made by role at an ONNX model's fixed input shapes."""
    return _feed_from_onnx(loaded.path, hints_for(loaded))


def _model_float(loaded: LoadedModel) -> np.dtype | None:
    """float64 for a float64 torch model (its untyped `--input`s are made float64)."""
    from export_gelu.exporter.loading.model_dtype import is_float64

    if loaded.is_onnx:
        return None
    module = loaded.reference_module()
    return np.dtype(np.float64) if module is not None and is_float64(module) else None


def fit_to_model(loaded: LoadedModel, feed: OrderedDict[str, np.ndarray]
                 ) -> OrderedDict[str, np.ndarray]:
    """`feed` checked against what the model declares (exit 2 naming the mismatch), in the
    order the model takes its inputs."""
    if loaded.is_onnx:
        return _keep_generated(feed, _check_against_onnx(loaded.path, feed))
    if loaded.exported is not None:
        _check_against_program(loaded, feed)
    elif loaded.module is not None:
        _check_against_module(loaded, feed)
    return feed


def _keep_generated(given: object, ordered: OrderedDict[str, np.ndarray]
                    ) -> OrderedDict[str, np.ndarray]:
    """`ordered` (the feed reordered), still saying which of its inputs were generated."""
    how = generated_inputs(given)
    if not how:
        return ordered
    out = GeneratedFeed(ordered)
    out.generated = how
    return out


def generated_inputs(feed: object) -> dict[str, str]:
    """Which inputs of `feed` export-gelu made up, and how (name → words); {} for real data
    (`--inputs FILE.npz`, a model's example inputs)."""
    return dict(getattr(feed, "generated", None) or {})
