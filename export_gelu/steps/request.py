"""Before any work: the options checked (exit 2/3), `--threads` bound to the machine, and every
file the run writes checked against what it reads (output_plan.py); the request a command
runs on."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TypeVar

from export_gelu.errors import BadInputError
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.notes import Note
from export_gelu.onnx_file import ParsedFiles, parsing_once
from export_gelu.options import (
    ExportOptions,
    RunOptions,
    VerifyOptions,
    bound_threads,
    validate,
)
from export_gelu.output_plan import check_outputs, names_folder
from export_gelu.results.request import Request

OptionsT = TypeVar("OptionsT", bound=RunOptions)


def _refuse_for_in_memory(options: RunOptions, loaded: LoadedModel | None) -> None:
    """What a model without a file cannot do: a default output name, a device bundle."""
    if loaded is None:
        return
    if isinstance(options, VerifyOptions) and not (options.device_outputs or options.bundle):
        return  # verify runs the module as it is against DEPLOYED
    if not isinstance(options, ExportOptions) or options.gelu == "auto":
        raise BadInputError(f"{loaded.path}: a model in memory can be exported and verified; "
                            "save it (torch.export.save) for --compare-forms, --gelu auto or "
                            "a device bundle")
    if not options.output or names_folder(options.output):
        raise BadInputError(f"{loaded.path} has no file to name the output after: pass "
                            "output='model.onnx'")
    if options.bundle:
        raise BadInputError(f"{loaded.path}: a device bundle needs the model as a file (the "
                            "device's outputs are verified against it later); save it with "
                            "torch.export.save and export that file")


def prepare(options: OptionsT, model: str | Path, *, deployed: str | Path | None = None,
            loaded: LoadedModel | None = None) -> Request[OptionsT]:
    """The request for `model` (and the artifact `deployed` that verify checks), its options
    checked first (exit 2/3 before any work). `loaded`: a model already in memory
    (exporter/loading/in_memory.py), exported as it is; `model` is then its label."""
    _refuse_for_in_memory(options, loaded)
    parsed = ParsedFiles()  # the run's ONNX parses, from here on
    with parsing_once(parsed):
        checked = validate(options, deployed=deployed)
        options, threads_note = bound_threads(options)
        if threads_note:
            checked = dataclasses.replace(checked, notes=(*checked.notes,
                                                          Note(threads_note, "threads-clamped")))
        verify = options if isinstance(options, VerifyOptions) else None
        outputs = check_outputs(options, model, deployed=deployed,
                                device_outputs=verify.device_outputs if verify else None,
                                device_times=verify.device_times if verify else None)
    checked = dataclasses.replace(checked, outputs=outputs)
    return Request(options, checked, Path(model),
                   Path(deployed) if deployed is not None else None, loaded, parsed)
