"""A bundle's manifest.json as it comes back from the device: every field a verify reads
checked for type and range before anything uses it (exit 2 naming the file and the field).

The manifest is the device's copy: whoever could write the folder could write it. Its hashes
tie the graphs to it (integrity), not to the folder (containment: untrusted_files.py).
Checked here: the model and graph entries (names, hashes, external data as relative paths),
the target and TensorRT version (short words, shown in the summary), the precision (one
export-gelu knows) and tolerances (finite, >= 0), trtexec's warm-up (finite, >= 0), the
localize entry's tensor names, and a forms bundle's forms: a list of objects, each a GELU
form export-gelu writes (its name is a folder of the bundle: never a path of the device's
choosing), none listed twice.
"""

from __future__ import annotations

import re
from typing import Any

from export_gelu.errors import BadInputError
from export_gelu.passes.forms import GELU_FORMS
from export_gelu.shown import shown
from export_gelu.tolerances import JUDGED_PRECISIONS
from export_gelu.untrusted_files import (
    checked_dict,
    checked_list,
    checked_number,
    checked_str,
)

#: A TensorRT version as a bundle records it ("8.2.1", "10"), and a target ("trt8.2").
_VERSION = re.compile(r"\d{1,3}(?:\.\d{1,4}){0,3}")
_TARGET = re.compile(r"[A-Za-z0-9_.\-]{1,40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _str_list(value: object, where: str) -> list[str]:
    items = checked_list(value, where)
    for i, item in enumerate(items):
        checked_str(item, f"{where}[{i}]")
    return items


def _word(value: object, where: str, pattern: re.Pattern[str], what: str) -> str:
    text = checked_str(value, where)
    if not pattern.fullmatch(text):
        raise BadInputError(f"{where} is {shown(repr(text), 60)}, not {what}")
    return text


def _graph(entry: object, where: str) -> None:
    graph = checked_dict(entry, where)
    checked_str(graph.get("file"), f"{where}.file")
    _word(graph.get("sha256"), f"{where}.sha256", _SHA256, "a SHA-256 in hex")
    if "external_data" in graph:
        _str_list(graph["external_data"], f"{where}.external_data")


def _forms(value: object, where: str) -> None:
    forms = checked_list(value, where)
    if not forms:
        raise BadInputError(f"{where} lists no form")
    seen: dict[str, int] = {}
    for i, entry in enumerate(forms):
        row = checked_dict(entry, f"{where}[{i}]")
        names = [row.get("form"), *_str_list(row.get("same_as", []), f"{where}[{i}].same_as")]
        for j, name in enumerate(names):
            at = f"{where}[{i}].form" if j == 0 else f"{where}[{i}].same_as[{j - 1}]"
            if not isinstance(name, str) or name not in GELU_FORMS:
                raise BadInputError(f"{at} is {shown(repr(name), 60)}, not a GELU form "
                                    f"export-gelu writes ({', '.join(GELU_FORMS)})")
            if name in seen:
                raise BadInputError(f"{at}: form {name} is listed twice (also {where}"
                                    f"[{seen[name]}]); a manifest lists each form once")
            seen[name] = i
        _graph(row.get("graph"), f"{where}[{i}].graph")


def check_manifest(data: dict[str, Any], where: str) -> dict[str, Any]:
    """`data` (a manifest whose format and version were checked), every field a verify reads
    checked; `where` names the file in messages (`--bundle B: manifest.json`)."""
    model = checked_dict(data.get("model"), f"{where}: model")
    checked_str(model.get("file", ""), f"{where}: model.file")
    _word(model.get("sha256"), f"{where}: model.sha256", _SHA256, "a SHA-256 in hex")
    if "forms" in data:
        _forms(data["forms"], f"{where}: forms")
    else:
        _graph(data.get("graph"), f"{where}: graph")
    if "tensorrt" in data:
        _word(data["tensorrt"], f"{where}: tensorrt", _VERSION, "a TensorRT version")
    if "target" in data:
        _word(data["target"], f"{where}: target", _TARGET, "a target's name")
    if data.get("precision") is not None and data["precision"] not in JUDGED_PRECISIONS:
        raise BadInputError(f"{where}: precision is {shown(repr(data['precision']), 40)}, not "
                            f"one of {', '.join(JUDGED_PRECISIONS)}")
    if data.get("tolerances") is not None:
        tol = checked_dict(data["tolerances"], f"{where}: tolerances")
        for key in ("atol", "rtol"):
            if key in tol:
                checked_number(tol[key], f"{where}: tolerances.{key}")
    if data.get("trtexec") is not None:
        trtexec = checked_dict(data["trtexec"], f"{where}: trtexec")
        if "warmup_ms" in trtexec:
            checked_number(trtexec["warmup_ms"], f"{where}: trtexec.warmup_ms")
    if data.get("localize") is not None:
        localize = checked_dict(data["localize"], f"{where}: localize")
        _str_list(localize.get("outputs", []), f"{where}: localize.outputs")
    return data
