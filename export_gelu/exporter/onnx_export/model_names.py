"""Which names a torch model's exported outputs get, and giving them (see output_names.py)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import onnx

from export_gelu.errors import BadInputError
from export_gelu.exporter.onnx_export.output_names import (
    names_from_spec,
    names_from_value,
    rename_outputs,
)
from export_gelu.notes import Note

if TYPE_CHECKING:
    import torch

    from export_gelu.exporter.inputs.call_plan import CallPlan
    from export_gelu.exporter.torch_values import PyTree


def model_output_names(loaded: object, module: torch.nn.Module | None,
                       program: torch.export.ExportedProgram | None, plan: CallPlan,
                       args: tuple[PyTree, ...]) -> list[str]:
    """The model's own output names: the loaded ExportedProgram's output tree, the captured
    program's, or (no program) what one eager call returns."""
    own = getattr(loaded, "output_names", None)  # a LoadedModel's
    if own:
        return list(own)
    spec = getattr(getattr(program, "call_spec", None), "out_spec", None)
    if spec is not None:
        return names_from_spec(spec)
    import torch

    from export_gelu.exporter.inputs.call_plan import call

    if module is None:
        return []
    try:
        with torch.no_grad():
            return names_from_value(call(module, plan, args))
    except Exception:  # noqa: BLE001 - the exporter ran it; naming is best effort
        return []


def apply_output_names(model: onnx.ModelProto, names: list[str], forced: bool,
                       own: list[str] | None = None) -> list[str]:
    """Rename `model`'s outputs to `names` in place; notes for the report. `forced`
    (`--output-names`): a count that does not match is an error, else a note. `own`: the
    model's own names, shown in that error."""
    have = [o.name for o in model.graph.output]
    if len(names) != len(have):
        if forced:
            shown = own if own and len(own) == len(have) else have
            raise BadInputError(f"--output-names gives {len(names)} name(s) but the model has "
                                f"{len(have)} output(s) ({', '.join(shown)})")
        if names:
            return [f"outputs keep the exporter's names: the model returns {len(names)} "
                    f"tensor(s), the graph has {len(have)}"]
        return []
    if names == have:
        return []
    notes: list[str] = []
    if not forced:
        names, clashes = unique_output_names(model, names)
        if clashes:
            notes.append(Note("output name(s) that are also graph inputs or inner values made "
                              "unique (as optimum does): " + ", ".join(
                                  f"{old} → {new}" for old, new in clashes), "output-renamed"))
    changed = rename_outputs(model, names)
    if not forced and all(re.fullmatch(r"output_\d+", n) for n in names):
        return []  # positions only: nothing worth a note
    how = "as given by --output-names" if forced else "as the model names them"
    if changed:
        notes.insert(0, f"graph outputs named {how}: " + ", ".join(n for _o, n in changed))
    return notes


def unique_output_names(model: onnx.ModelProto,
                        names: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The model's own output names, each that is already an input, initializer or inner value
    of the graph (a UNet's input `sample` and output field `sample`) prefixed `out_` until it
    is free; and the (name, new name) pairs changed."""
    graph = model.graph
    olds = {o.name for o in graph.output}
    taken = ({o for n in graph.node for o in n.output} | {i.name for i in graph.input}
             | {i.name for i in graph.initializer}) - olds
    used = set(names)
    out: list[str] = []
    clashes: list[tuple[str, str]] = []
    for name in names:
        new = name
        while new in taken or (new != name and new in used):
            new = f"out_{new}"
        if new != name:
            clashes.append((name, new))
            used.add(new)
        out.append(new)
    return out, clashes
