"""Every command as its list of stages (export's in export_command.py), and the fresh state a
list runs on (`stage.run_stages`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from export_gelu.errors import BadInputError
from export_gelu.exporter.loading.load import LoadedModel
from export_gelu.notes import Note
from export_gelu.options import (
    ExportOptions,
    FormsOptions,
    RunOptions,
    VerifyOptions,
    bound_threads,
    validate,
)
from export_gelu.output_plan import check_outputs, names_folder
from export_gelu.pipeline import (
    device_forms,
    device_stages,
    finish,
    forms,
    forms_bundle,
    localize,
    sources,
    verify_stages,
)
from export_gelu.pipeline.export_command import EXPORT
from export_gelu.pipeline.stage import Stage
from export_gelu.pipeline.state import FormsState, OptionsT, RunState, VerifyState
from export_gelu.progress import Progress


def _bundles_verified(state: RunState[VerifyOptions | FormsOptions]) -> bool:
    return bool(state.options.bundle)


def _saves_data(state: VerifyState) -> bool:
    return bool(state.options.save_inputs or state.options.save_outputs)


VERIFY: tuple[Stage[VerifyState], ...] = (
    Stage("plan", verify_stages.plan_verify, timed_as=None),
    Stage("open", verify_stages.open_artifact, timed_as="load"),
    Stage("load", sources.load),
    Stage("inputs", verify_stages.verify_inputs, timed_as="load"),
    Stage("describe", verify_stages.describe_deployed, timed_as="load"),
    Stage("reference", verify_stages.verify_reference, timed_as="verify"),
    Stage("verify", verify_stages.verify_check),
    Stage("localize", localize.localize_stage, applies=localize.localizes, timed_as="verify"),
    Stage("save_data", verify_stages.save_data, applies=_saves_data, timed_as="verify"),
    Stage("bundle", verify_stages.verify_bundle, applies=_bundles_verified),
    Stage("calibration", verify_stages.calibrate_verify, applies=verify_stages.calibrates),
    Stage("report", finish.write_report, timed_as=None),
)

DEVICE_VERIFY: tuple[Stage[VerifyState], ...] = (
    Stage("plan", device_stages.plan_device_verify, timed_as=None),
    Stage("device_run", device_stages.read_device_run, timed_as="load"),
    Stage("load", sources.load),
    Stage("inputs", device_stages.device_inputs, timed_as="load"),
    Stage("verify", device_stages.device_check),
    Stage("localize", localize.localize_device, applies=localize.localizes, timed_as="verify"),
    Stage("report", finish.write_report, timed_as=None),
)

#: `verify --bundle DIR --device-outputs DIR/outputs` of a bundle of GELU forms: each judged,
#: one chosen (and written with -o).
DEVICE_FORMS_VERIFY: tuple[Stage[VerifyState], ...] = (
    Stage("plan", device_stages.plan_device_verify, timed_as=None),
    Stage("device_run", device_forms.read_forms_run, timed_as="load"),
    Stage("load", sources.load),
    Stage("inputs", device_stages.device_inputs, timed_as="load"),
    Stage("verify", device_forms.forms_check),
    Stage("write", device_forms.write_chosen, applies=device_forms.writes_chosen,
          timed_as="verify"),
    Stage("report", finish.write_report, timed_as=None),
)

#: `--compare-forms`: the model loaded once, a graph per form, checked and timed together;
#: with `--bundle DIR`, every form's graph in a device bundle too.
COMPARE_FORMS: tuple[Stage[FormsState], ...] = (
    Stage("plan", forms.plan_forms, timed_as=None),
    Stage("load", sources.load),
    Stage("inputs", forms.forms_inputs, timed_as="load"),
    Stage("forms", forms.compare_forms_stage),
    Stage("bundle", forms_bundle.compare_forms_bundle, applies=_bundles_verified),
)
FORMS_REPORT: tuple[Stage[FormsState], ...] = (
    *COMPARE_FORMS, Stage("calibration", forms.calibrate_forms),
    Stage("report", finish.write_report, timed_as=None))


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


def new_state(options: OptionsT, model: str | Path, progress: Progress | None = None, *,
              deployed: str | Path | None = None, loaded: LoadedModel | None = None
              ) -> RunState[OptionsT]:
    """A fresh state for `model` (and the artifact `deployed` that verify checks), its options
    checked first (exit 2/3 before any work). `loaded`: a model already in memory
    (exporter/loading/in_memory.py), exported as it is; `model` is then its label."""
    _refuse_for_in_memory(options, loaded)
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
    return RunState(options, checked, Path(model), progress or Progress(enabled=False),
                    output=Path(deployed) if deployed is not None else None, loaded=loaded)


__all__ = ["EXPORT", "VERIFY", "DEVICE_VERIFY", "DEVICE_FORMS_VERIFY",
           "COMPARE_FORMS", "FORMS_REPORT", "new_state"]
