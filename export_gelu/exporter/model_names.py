"""Which names a torch model's exported outputs get, and giving them (see output_names.py)."""

from __future__ import annotations

import re
from typing import Any

import onnx

from export_gelu.errors import BadInputError
from export_gelu.exporter.output_names import names_from_spec, names_from_value, rename_outputs


def model_output_names(loaded: Any, module: Any, program: Any, plan: Any,
                       args: tuple[Any, ...]) -> list[str]:
    """The model's own output names: the loaded ExportedProgram's output tree, the captured
    program's, or (no program) what one eager call returns."""
    if getattr(loaded, "output_names", None):
        return list(loaded.output_names)
    spec = getattr(getattr(program, "call_spec", None), "out_spec", None)
    if spec is not None:
        return names_from_spec(spec)
    import torch

    from export_gelu.exporter.call_plan import call

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
    changed = rename_outputs(model, names)
    if not forced and all(re.fullmatch(r"output_\d+", n) for n in names):
        return []  # positions only: nothing worth a note
    how = "as given by --output-names" if forced else "as the model names them"
    return [f"graph outputs named {how}: " + ", ".join(n for _o, n in changed)] if changed else []
