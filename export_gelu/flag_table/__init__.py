"""The flag table (table.py) put to work: a command's parser, its options record from the
values the parser or the API's keywords give, and the API's keywords read by the table.

Values are keyed as the parser stores them, by each flag's key (its first API keyword: `input`,
`inputs`, `verify` for `--no-verify`), so the command line and the Python API build the same
record by the same code.
"""

from __future__ import annotations

import argparse
import inspect
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from export_gelu.flag_table.parsers import PARSERS
from export_gelu.flag_table.table import APIS, FLAGS, RECORDS
from export_gelu.flags.declare import RECORD_OF, Flag
from export_gelu.flags.keywords import KeywordError, keyword_values, with_keywords
from export_gelu.flags.parsers import build_parser
from export_gelu.options import (
    COMPARE_TARGETS,
    ExportOptions,
    FormsOptions,
    InspectOptions,
    RunOptions,
    VerifyOptions,
)

#: Keywords an earlier release took (the options' field names): old → the flag's keyword.
RENAMED = {"export": {"inputs_npz": "inputs"},
           "verify": {"inputs_file": "inputs", "calibrate": "calibration",
                      "bundle_target": "target"},
           "compare_forms": {"inputs_npz": "inputs"}}
#: Names users reach for that are no keyword: → what to write instead.
INSTEAD = {"no_verify": "verify=False", "no_calibration": "calibration=False",
           "import_": "imports=[...]", "import_module": "imports=[...]",
           "module_imports": "imports=[...]", "inputs_file": "inputs='FILE.npz'",
           "inputs_npz": "inputs='FILE.npz'", "input_file": "inputs='FILE.npz'",
           "npz": "inputs='FILE.npz'", "specs": "input=['NAME:SHAPE[:DTYPE]', ...]",
           "out": "output", "o": "output", "example_inputs": "args=(...)"}


def parser(name: str) -> argparse.ArgumentParser:
    """The command-line parser `name` (export, verify, inspect), built from the table."""
    return build_parser(PARSERS[name], FLAGS)


def flags_of(command: str) -> list[Flag]:
    """The flags `command` takes (of declare.COMMANDS), in declaration order."""
    return [f for f in FLAGS if command in f.commands]


def record_fields(command: str, values: Mapping[str, object]) -> dict[str, Any]:
    """The fields of `command`'s options record from `values` (keyed by flag key): each flag
    the command takes whose field that record holds. A repeatable flag given one string
    holds that one item (`imports='os'` is ('os',), never 'o', 's'); None leaves its default."""
    record = RECORD_OF[command]
    fields: dict[str, Any] = {}
    for flag in flags_of(command):
        if flag.field_name is None or not {record, "run"} & set(flag.records):
            continue
        if flag.key not in values:
            continue
        value = values[flag.key]
        if flag.kind == "repeat":
            if value is None:
                continue
            if isinstance(value, (str, os.PathLike)):
                value = (value,)
        fields[flag.field_name] = value
    return fields


def export_options(values: Mapping[str, object]) -> ExportOptions:
    """`export-gelu MODEL` flags or export()'s keywords → the options export() runs on."""
    return ExportOptions(**record_fields("export", values))


def verify_options(values: Mapping[str, object]) -> VerifyOptions:
    """`export-gelu verify` flags or verify()'s keywords → the options verify() runs on."""
    return VerifyOptions(**record_fields("verify", values))


def forms_targets(target: str | None, bundle: object) -> tuple[str, ...]:
    """The targets `--compare-forms` measures: `--target` when given, else TensorRT's for a
    bundle (the device's), else fused and expanded GELUs (onnx and trt8.6)."""
    return (target,) if target else ("trt",) if bundle else COMPARE_TARGETS


def forms_options(values: Mapping[str, object]) -> FormsOptions:
    """`export-gelu MODEL --compare-forms` flags or compare_forms()'s keywords → the options
    the comparison runs on (`target` names the one target; `targets` several)."""
    fields = record_fields("compare-forms", values)
    if "targets" not in fields:
        target = values.get("target")
        fields["targets"] = forms_targets(target if isinstance(target, str) else None,
                                          values.get("bundle"))
    return FormsOptions(**fields)


def inspect_options(values: Mapping[str, object]) -> InspectOptions:
    """`export-gelu inspect` flags or inspect_model()'s keywords → its options."""
    return InspectOptions(**record_fields("inspect", values))


#: Each command's record from its values.
BUILD: dict[str, Callable[[Mapping[str, object]], RunOptions]] = {
    "export": export_options, "compare-forms": forms_options, "verify": verify_options,
    "inspect": inspect_options}


def _api(function: str) -> tuple[list[Flag], tuple[str, ...]]:
    spec = next(a for a in APIS if a.function == function)
    return spec.flags(FLAGS), spec.own


def api_values(function: str, given: Mapping[str, object], known: Sequence[str] = ()
               ) -> dict[str, Any]:
    """An API function's keywords → the values they give, keyed as the parser keys them (a
    flag not given is left out: the record's default holds). `inputs=[specs]`, an earlier
    release's spelling of `input=`, still works (with a DeprecationWarning)."""
    flags, _own = _api(function)
    given = dict(given)
    inputs = given.get("inputs")
    if inputs is not None and not isinstance(inputs, (str, os.PathLike)):
        if given.get("input"):
            raise KeywordError(f"{function}(): input= and a list inputs= both give input "
                               "specs; input= takes the specs, inputs= the .npz file")
        warnings.warn(f"{function}(): inputs=[specs] is input=[specs] now (the flag --input); "
                      "inputs= names the file of real inputs (--inputs FILE.npz)",
                      DeprecationWarning, stacklevel=3)
        given["input"] = given.pop("inputs")
    return keyword_values(function, flags, given, known=known, renamed=RENAMED.get(function),
                          instead=INSTEAD)


def api_signature(func: Callable[..., object]) -> inspect.Signature:
    """`func`'s signature with every keyword of the table spelled out (help(), editors)."""
    flags, own = _api(func.__name__)
    return with_keywords(func, flags, own)


__all__ = ["FLAGS", "PARSERS", "RECORDS", "APIS", "parser", "flags_of", "record_fields",
           "export_options", "verify_options", "forms_options", "inspect_options",
           "forms_targets", "api_values", "api_signature", "KeywordError", "BUILD"]
