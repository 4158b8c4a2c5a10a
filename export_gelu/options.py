"""A run's options: one record per command (export, verify, compare-forms, inspect), built
alike by the CLI (from its flags) and the Python API (from its keywords), checked by one
function, `validate`, and recorded in the report (its `options` key).

The records are generated from the flag declarations (export_gelu/option_records.py, from
export_gelu/flag_table/table.py); they share their common fields through `RunOptions`, and
each command's own flags are in its subclass. Messages name the CLI flag (`--threads`,
`--atol`), also for API callers.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from export_gelu.errors import BadInputError, TargetUnmetError
from export_gelu.flags.dynamic import DimRange
from export_gelu.option_records import (
    ExportOptions,
    FormsOptions,
    InspectOptions,
    RunOptions,
    VerifyOptions,
)
from export_gelu.passes.forms import GELU_FORMS, check_form_name  # noqa: F401 - re-exported

PRECISIONS = ("fp32", "fp16", "bf16")
#: The quantized precisions an export writes (docs/quantization.md): the graph is made in fp32,
#: then quantized for the target.
QUANTIZED = ("int8", "fp8")
EXPORT_PRECISIONS = PRECISIONS + QUANTIZED
#: ONNX Runtime's calibrators (`--calibrator`; export_gelu/quantize/calibrate.py runs them).
CALIBRATORS = ("minmax", "entropy", "percentile")
#: `--keep-precision auto`: keep the fewest most sensitive modules until `--target-sqnr`.
AUTO_KEEP = "auto"
#: The forms `--compare-forms` measures (the plugin form does not run in ONNX Runtime).
COMPARED_FORMS = ("keep", "erf", "tanh", "sigmoid")
#: Fused `Gelu` (opset 20, dynamo exporter) and expanded primitives (opset 17, TorchScript).
COMPARE_TARGETS = ("onnx", "trt8.6")
#: ONNX opsets that exporters emit start here.
MIN_OPSET = 7

#: What each command has always said for the same refusal; verify's words predate export's.
_WORDING = {
    "export": {"runs": "--iterations and --warmup cannot be negative",
               "tolerance": "{flag} {value}: a tolerance must be a finite number >= 0",
               "both_inputs": "give either --input specs or --inputs FILE.npz, not both"},
    "verify": {"runs": "--iterations and --warmup must not be negative",
               "tolerance": "{flag} must be a finite number ≥ 0",
               "both_inputs": "give either --input specs or --inputs FILE, not both"},
}
#: `--cast-down` with a command that exports every form (the CLI's --compare-forms too).
CAST_DOWN_ONE_EXPORT = "--cast-down applies to one export: drop --compare-forms / --gelu auto"


@dataclass(frozen=True)
class Checked:
    """What checking the options resolved on the way (export: the target and parsed flags)."""

    profile: Any = None  # targets.TargetProfile
    target_note: str = ""
    output_names: list[str] | None = None
    dynamic: list[DimRange] = dataclasses.field(default_factory=list)  # --dynamic, parsed
    outputs: Any = None  # output_plan.OutputPlan: what the run writes, checked
    profiles: tuple[Any, ...] = ()  # inspect: the target profiles to judge the file for
    notes: tuple[str, ...] = ()  # what checking changed (a --threads clamped), for the report


def check_form(form: str, profile: Any) -> None:
    """`--gelu FORM` for `profile`: a known form, and the plugin only where it can be built."""
    check_form_name(form)
    if form == "plugin":
        from export_gelu.passes.onnx.plugin_form import refuse_plugin_where_unavailable

        refuse_plugin_where_unavailable(profile)


def _check_runs(o: RunOptions, wording: Mapping[str, str]) -> None:
    if o.iterations < 0 or o.warmup < 0:
        raise BadInputError(wording["runs"])


def _check_tolerances(o: RunOptions, wording: Mapping[str, str]) -> None:
    """A NaN tolerance would pass everything: refuse it, and negatives."""
    for flag, value in (("--atol", o.atol), ("--rtol", o.rtol)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise BadInputError(wording["tolerance"].format(flag=flag, value=value))


def _check_precision(precision: str | None, optional: bool = False,
                     allowed: tuple[str, ...] = PRECISIONS) -> None:
    if not (optional and precision is None) and precision not in allowed:
        raise BadInputError(f"--precision {precision!r}: choose one of {', '.join(allowed)}")


def quantizing(o: RunOptions) -> bool:
    """`--precision int8|fp8`: the export quantizes its fp32 graph."""
    return o.precision in QUANTIZED


def _check_quantization(o: ExportOptions | FormsOptions) -> None:
    """`--precision int8|fp8` and its flags (whether the target takes it is the route's
    question, asked when the export is planned: steps/plan.py)."""
    quantized = quantizing(o)
    own = [flag for flag, given in (("--calibration-data", o.calibration_data),
                                    ("--calibrator", o.calibrator),
                                    ("--keep-precision", o.keep_precision),
                                    ("--target-sqnr", o.target_sqnr is not None)) if given]
    if own and not quantized:
        raise BadInputError(f"{', '.join(own)} quantize: add --precision int8 or fp8")
    if not quantized:
        return
    if o.calibrator is not None and o.calibrator not in CALIBRATORS:
        raise BadInputError(f"--calibrator {o.calibrator!r}: choose one of "
                            f"{', '.join(CALIBRATORS)}")
    if o.target_sqnr is not None and not (math.isfinite(o.target_sqnr) and o.target_sqnr > 0):
        raise BadInputError(f"--target-sqnr {o.target_sqnr}: a positive number of dB")
    if o.target_sqnr is not None and AUTO_KEEP not in o.keep_precision:
        raise BadInputError("--target-sqnr is the target of --keep-precision auto")
    if AUTO_KEEP in o.keep_precision and len(o.keep_precision) > 1:
        raise BadInputError("--keep-precision auto chooses the modules itself: give auto alone")
    for flag, given in (("--cast-down", getattr(o, "cast_down", False)),
                        ("--engine", bool(getattr(o, "engine", None)))):
        if given:
            raise BadInputError(f"{flag} with --precision {o.precision} is not supported yet "
                                "(docs/quantization.md, 'Not done yet')")


def _check_cache_forms_bundle(o: RunOptions, target: str) -> None:
    """A bundle of every GELU form at int8 for TensorRT 7.x (an fp32 graph and a calibration
    cache per form) is not written yet: refused (exit 2) before any work."""
    from export_gelu.targets import resolve_target
    from export_gelu.trt_parser.quantization import quantization_support

    profile = resolve_target(target)[0]
    if o.precision != "int8" or profile.runtime != "trt":
        return
    if not quantization_support(profile.trt_version).explicit_int8:
        raise BadInputError(f"--bundle of every GELU form with --precision int8 on "
                            f"{profile.name} (a calibration cache per form) is not supported "
                            "yet; bundle one form (--gelu FORM --precision int8 --bundle DIR)")


#: `--device` values (check/runners/devices.py runs them; whether CUDA is there is the machine's).
DEVICE_CHOICES = ("cpu", "cuda")


def _check_device(o: RunOptions) -> None:
    if o.device is not None and o.device not in DEVICE_CHOICES:
        raise BadInputError(f"--device {o.device!r}: choose one of {', '.join(DEVICE_CHOICES)}")


def _check_threads(o: RunOptions) -> None:
    if o.threads < 1:
        raise BadInputError("--threads must be at least 1")


def machine_cpus() -> int:
    """How many CPUs this process may run on (its affinity mask; the count elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_Options = TypeVar("_Options", bound=RunOptions)


def bound_threads(options: _Options) -> tuple[_Options, str | None]:
    """`options` with `--threads` at most the CPUs this process may use, and the note saying
    so when it was more (thread pools of 100 000 threads never finish starting)."""
    cpus = machine_cpus()
    if options.threads <= cpus:
        return options, None
    note = (f"--threads {options.threads} is more than the {cpus} CPU(s) this process may "
            f"use; ran with {cpus}")
    return dataclasses.replace(options, threads=cpus), note


def _check_export(o: ExportOptions) -> Checked:
    from export_gelu.flags.dynamic import parse_dynamic_flag
    from export_gelu.flags.output_names import parse_output_names
    from export_gelu.targets import resolve_target

    names = parse_output_names(o.output_names)
    profile, note = resolve_target(o.target)
    if o.gelu == "auto" and o.cast_down:
        raise BadInputError(CAST_DOWN_ONE_EXPORT)
    check_form("keep" if o.gelu == "auto" else o.gelu, profile)  # auto: every form is measured
    _check_precision(o.precision, allowed=EXPORT_PRECISIONS)
    if o.precision not in profile.precisions and not quantizing(o):
        raise TargetUnmetError(f"{profile.name} does not take {o.precision}")
    _check_quantization(o)
    if o.opset is not None and o.opset > profile.opset_ceiling:
        raise TargetUnmetError(f"--opset {o.opset} is above {profile.name}'s ceiling "
                               f"{profile.opset_ceiling}")
    _check_threads(o)
    _check_device(o)
    _check_runs(o, _WORDING["export"])
    _check_tolerances(o, _WORDING["export"])
    if o.opset is not None and o.opset < MIN_OPSET:
        raise BadInputError(f"--opset {o.opset}: ONNX opsets that exporters emit start at "
                            f"{MIN_OPSET}")
    flags = [parse_dynamic_flag(d) for d in o.dynamic]  # refused here, not only on a GPU
    if o.localize and not o.verify:
        raise BadInputError("--localize compares the graph with PyTorch: drop --no-verify")
    if o.bundle:
        _check_bundle_target(profile)
        if o.gelu == "auto":
            _check_cache_forms_bundle(o, o.target)
    _check_inputs(o, o.inputs_npz, _WORDING["export"], named_dims=True)
    _check_loading(o)
    return Checked(profile, note, names, flags)


def _check_bundle_target(profile: Any) -> None:
    if profile.runtime != "trt":
        raise BadInputError(f"--bundle is for TensorRT targets (trt7.0 … trt11); {profile.name} "
                            "runs in ONNX Runtime here")


def _check_input_specs(specs: Sequence[str], named_dims: bool) -> None:
    """Each `--input` spec parsed as the run parses it (with `named_dims`, export's, a dim
    named for `--dynamic` stands for a size: whether a range names it is the model's), and
    no input named twice."""
    if not specs:
        return
    from export_gelu.flags.dynamic import split_named_dims
    from export_gelu.flags.input_spec import parse_input_spec

    names = []
    for spec in specs:
        named = split_named_dims(spec)[1] if named_dims else {}
        parts = spec.split(":")
        if named:  # a placeholder size, as the dynamic plan parses it
            parts[1] = "x".join("1" if i in named else d for i, d in enumerate(parts[1].split("x")))
        names.append(parse_input_spec(":".join(parts)).name)
    if len(set(names)) != len(names):
        raise BadInputError(f"--input: the same name is given twice ({', '.join(names)})")


def _check_inputs(o: RunOptions, inputs_file: str | None, wording: Mapping[str, str],
                  named_dims: bool = False) -> None:
    """`--input` specs or `--inputs FILE`, not both; the specs' syntax."""
    if o.inputs and inputs_file:
        raise BadInputError(wording["both_inputs"])
    _check_input_specs(o.inputs, named_dims)


def _check_loading(o: RunOptions) -> None:
    """`--model-factory PKG.MODULE:FUNC` and `--task` by their form (importing the factory and
    matching the task to a folder's config happen when the model loads)."""
    if o.model_factory is not None:
        from export_gelu.flags.factory import factory_parts

        factory_parts(o.model_factory)
    if o.task:
        from export_gelu.flags.tasks import task_by_name

        task_by_name(o.task)


def check_compare_forms_flags(*, output: Any, gelu: str, cast_down: bool) -> None:
    """`export-gelu MODEL --compare-forms` (or `export(compare_forms=True)`) with export flags
    its record (FormsOptions) has no field for: refused, not dropped (compare_forms() takes no
    such keyword)."""
    if output or gelu not in ("keep", "auto"):
        raise BadInputError("--compare-forms exports every form itself and writes no model: "
                            "drop -o and --gelu")
    if cast_down:
        raise BadInputError(CAST_DOWN_ONE_EXPORT)


def recorded_forms(o: VerifyOptions) -> bool:
    """`--device-outputs DIR`: the folder a bundle of GELU forms' device wrote (a file: one
    graph's outputs)."""
    return bool(o.device_outputs) and Path(str(o.device_outputs)).is_dir()


def _check_device_verify(o: VerifyOptions, deployed: str | Path | None) -> None:
    """Which flags go together in verify: DEPLOYED or recorded outputs, a bundle or --inputs,
    and what a bundle of GELU forms takes."""
    if o.device_times and not o.device_outputs:
        raise BadInputError("--device-times needs --device-outputs from the same run")
    if o.device_outputs and (o.inputs or o.save_inputs or o.save_outputs):
        raise BadInputError("--device-outputs judges recorded outputs: drop --input, "
                            "--save-inputs and --save-outputs")
    if not o.device_outputs and deployed is None:
        raise BadInputError("DEPLOYED is required (or --bundle DIR --device-outputs FILE)")
    forms = recorded_forms(o)
    if o.output and not forms:
        raise BadInputError("-o writes the GELU form the device chose: it needs a bundle of "
                            "forms and the folder its device wrote (--bundle DIR "
                            "--device-outputs DIR/outputs)")
    if not o.device_outputs:
        return
    if o.bundle and o.inputs_file:
        raise BadInputError("--inputs: the bundle holds the inputs the device ran; give one or "
                            "the other")
    if not o.bundle and (deployed is None or not o.inputs_file):
        raise BadInputError("--device-outputs without --bundle needs DEPLOYED (the ONNX graph "
                            "the device ran) and --inputs (the inputs it ran on)")
    if not forms:
        return
    if not o.bundle:
        raise BadInputError(f"--device-outputs {Path(o.device_outputs)} is a folder: the "
                            "outputs of a bundle of GELU forms; give the bundle too "
                            "(--bundle DIR)")
    if o.device_times:
        raise BadInputError("--device-times: each form's times are read from its folder under "
                            "--device-outputs; drop --device-times")
    if o.localize:
        raise BadInputError("--localize: a bundle of GELU forms has no marked graph; make a "
                            "one-graph bundle of the form to localize (--gelu FORM --bundle)")


def _check_verify(o: VerifyOptions, deployed: str | Path | None) -> Checked:
    from export_gelu.targets import resolve_target

    _check_threads(o)
    _check_device(o)
    _check_runs(o, _WORDING["verify"])
    _check_precision(o.precision, optional=True)
    _check_tolerances(o, _WORDING["verify"])
    _check_device_verify(o, deployed)
    _check_inputs(o, o.inputs_file, _WORDING["verify"])
    _check_loading(o)
    if not o.bundle:
        return Checked()
    profile, note = resolve_target(o.bundle_target)  # --target: the bundle's TensorRT version
    _check_bundle_target(profile)
    return Checked(profile, note)


def _check_forms(o: FormsOptions) -> Checked:
    _check_quantization(o)
    _check_threads(o)
    _check_device(o)
    if o.iterations < 1:
        raise BadInputError("--iterations must be at least 1 to compare forms")
    bad = [f for f in o.forms if f not in COMPARED_FORMS]
    if bad:
        raise BadInputError(f"forms {', '.join(bad)}: compare takes {', '.join(COMPARED_FORMS)}")
    if o.bundle:
        from export_gelu.targets import resolve_target

        if len(o.targets) != 1:
            raise BadInputError("--bundle with --compare-forms: give one TensorRT --target "
                                "(the device's)")
        _check_bundle_target(resolve_target(o.targets[0])[0])
        _check_cache_forms_bundle(o, o.targets[0])
    if o.workdir is not None and not Path(o.workdir).is_dir():
        raise BadInputError(f"{o.workdir}: not a directory")
    _check_inputs(o, o.inputs_npz, _WORDING["export"])
    _check_loading(o)
    return Checked()


def _check_inspect(o: InspectOptions) -> Checked:
    from export_gelu.targets import PROFILES, resolve_profile

    profiles = [resolve_profile(t) for t in o.targets] if o.targets else list(PROFILES.values())
    return Checked(profiles=tuple({p.name: p for p in profiles}.values()))


def _type_ok(kind: str, value: Any) -> bool:
    """Whether `value` is of a field's declared type (its annotation's text): a bool is a
    bool (never a truthy string), a number is no bool, paths arrive as strings (_plain)."""
    if value is None and kind.endswith("| None"):
        return True
    checks = {"bool": lambda v: isinstance(v, bool),
              "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "str": lambda v: isinstance(v, str),
              "tuple[str, ...]": lambda v: isinstance(v, tuple) and all(
                  isinstance(x, str) for x in v)}
    return any(checks[part.strip()](value) for part in kind.split("|")
               if part.strip() in checks)


def check_types(options: RunOptions) -> None:
    """Every field of the record of its declared type: what the Python API's keywords are
    held to (the CLI's parser makes them so). TypeError naming the keyword."""
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if not _type_ok(str(f.type), value):
            want = "True or False" if f.type == "bool" else str(f.type).replace(" | ", " or ")
            raise TypeError(f"{f.name}={value!r}: expected {want}, not "
                            f"{type(value).__name__}")


def validate(options: RunOptions, *, deployed: str | Path | None = None) -> Checked:
    """Check every option of one command before any work (the only place they are checked):
    each value, its syntax (`--input`, `--dynamic`, `--output-names`, `--model-factory`,
    `--task`) and the flags' combinations; `deployed` is verify's DEPLOYED (None: not given).

    Bad values raise BadInputError (exit 2), values the target cannot take TargetUnmetError
    (exit 3), each naming the flag. The files a run writes are checked against each other and
    against what it reads by `output_plan.check_outputs`, right after (steps.request.prepare).
    A field of the wrong type (an API keyword: `allow_pickle='no'`) is a TypeError first.
    """
    check_types(options)
    if isinstance(options, ExportOptions):
        return _check_export(options)
    if isinstance(options, VerifyOptions):
        return _check_verify(options, deployed)
    if isinstance(options, FormsOptions):
        return _check_forms(options)
    if isinstance(options, InspectOptions):
        return _check_inspect(options)
    raise TypeError(f"no checks for {type(options).__name__}")
