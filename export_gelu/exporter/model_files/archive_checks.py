"""A TorchScript or ExportedProgram archive checked before it loads (containment.py's first
step): member names that clash in case, TorchScript source naming `__setstate__`, pickled
objects of custom C++ classes, and an ExportedProgram's JSON records and pickled constants.
Read through torch's own archive reader, so the bytes checked are the bytes the loader reads."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from export_gelu.bounded_json import parse_json
from export_gelu.errors import BadInputError
from export_gelu.exporter.model_files.containment import CUSTOM_CLASS_PREFIX, Finding
from export_gelu.exporter.model_files.detect import (
    LEGACY_PROGRAM,
    PROGRAM_CODE_MEMBERS,
    pickle_globals,
)
from export_gelu.exporter.model_files.torch_reader import torch_reader as _torch_reader

#: Largest TorchScript source member read for the scan (a model's code is far smaller).
MAX_SOURCE_BYTES = 64 << 20


def _case_clashes(names: Iterable[str]) -> list[str]:
    seen: dict[str, str] = {}
    clashes = []
    for name in names:
        key = name.lower()
        if key in seen:
            clashes.append(f"{seen[key]!r} and {name!r}")
        seen[key] = name
    return clashes


def _clashes(names: list[str]) -> list[Finding]:
    return [Finding("two members of one name", clash,
                    "would let torch's reader (names match in any case) read another member "
                    "than the check did")
            for clash in _case_clashes(names)]


#: Prefixes of a constant's `path_name` (in data/constants/*_constants_config.json) that make
#: torch.export.load unpickle it (torch/export/pt2_archive/_package.py, torch 2.13).
_UNPICKLED_CONSTANTS = ("opaque_obj_", "custom_obj_")


#: A payload's `path_name`: a member of the config's own folder (torch 2.13 writes
#: `weight_0`, `tensor_3`, `opaque_obj_0`); never a path with parts.
_PLAIN_MEMBER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}")


_PROGRAM_JSON = re.compile(r"models/[^/]*\.json")


_PAYLOAD_CONFIG = re.compile(r"data/(constants|weights)/[^/]*_config\.json")


#: Largest serialized program read for the check (its graph is in it, not its weights).
MAX_PROGRAM_JSON = 256 << 20


def program_archive_findings(path: Path) -> list[Finding]:
    """What an ExportedProgram archive would run while torch.export.load reads it or
    `.module()` builds its forward: members holding code (by name, in any case), constants
    its config says to unpickle (whatever the member is called), and any text of the
    serialized program that torch turns into Python source or evaluates (program_json),
    plus members whose names differ only in case. An archive in the layout of torch 2.7 and
    older (its program at the root, where torch's reader refuses to look) is read as
    torch.export.load reads it: with Python's zipfile, by exact name."""
    if _legacy_layout(path):
        return _legacy_findings(path)
    with _torch_reader(path) as reader:
        names = list(reader.get_all_records())
        findings = _clashes(names)
        for name in names:
            lower = name.lower()
            if any(lower.startswith(m) for m in PROGRAM_CODE_MEMBERS):
                findings.append(Finding(name, "the archive",
                                        "is code or a pickled object that loading would run"))
            elif _PAYLOAD_CONFIG.fullmatch(lower):
                findings.extend(_config_findings(reader, name))
            elif _PROGRAM_JSON.fullmatch(lower):
                findings.extend(_document_findings(reader, name))
    return findings + _legacy_findings(path)


def _legacy_layout(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as zf:
            return LEGACY_PROGRAM in zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise BadInputError(f"{path}: corrupt or unreadable archive ({exc})") from exc


def _legacy_findings(path: Path) -> list[Finding]:
    """torch.export.load falls back to torch 2.7's layout, read with Python's zipfile: a
    `serialized_exported_program.json` at the archive's root (every copy is checked)."""
    from export_gelu.exporter.model_files.program_json import program_json_problems

    findings: list[Finding] = []
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.filename != LEGACY_PROGRAM:
                    continue
                if info.file_size > MAX_PROGRAM_JSON:
                    findings.append(Finding("an oversized program", info.filename,
                                            "cannot be checked"))
                    continue
                try:
                    doc = parse_json(zf.read(info), f"{path}: {info.filename}",
                                     max_bytes=MAX_PROGRAM_JSON)
                except BadInputError:
                    findings.append(Finding("malformed or too deeply nested JSON",
                                            info.filename, "cannot be checked"))
                    continue
                findings += [Finding(what, info.filename, why)
                             for what, why in program_json_problems(doc)[:20]]
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError,
            NotImplementedError, RuntimeError) as exc:
        raise BadInputError(f"{path}: corrupt or unreadable archive ({exc})") from exc
    return findings


def _json_record(reader: Any, name: str) -> tuple[Any, list[Finding]]:
    if reader.get_record_size(name) > MAX_PROGRAM_JSON:
        return None, [Finding(f"{reader.get_record_size(name)} bytes of JSON", name,
                              "is more than a serialized program holds; it was not read")]
    try:
        return parse_json(bytes(reader.get_record(name)), name, max_bytes=MAX_PROGRAM_JSON), []
    except BadInputError:
        return None, [Finding("malformed or too deeply nested JSON", name, "cannot be checked")]


def _document_findings(reader: Any, name: str) -> list[Finding]:
    from export_gelu.exporter.model_files.program_json import program_json_problems

    doc, findings = _json_record(reader, name)
    if doc is None:
        return findings
    return [Finding(what, name, why) for what, why in program_json_problems(doc)[:20]]


def _config_findings(reader: Any, name: str) -> list[Finding]:
    from export_gelu.exporter.model_files.program_json import dotted_name

    config, findings = _json_record(reader, name)
    if config is None:
        return findings
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        return [Finding("a malformed payload config", name, "cannot be checked")]
    for fqn, meta in entries.items():
        path_name = str(meta.get("path_name", "")) if isinstance(meta, dict) else ""
        if not _PLAIN_MEMBER.fullmatch(path_name):
            findings.append(Finding(f"{fqn!r}'s path_name {path_name[:80]!r}", name,
                                    "is not a plain member name of the archive's payload "
                                    "folder (a path out of it is never read)"))
        elif path_name.startswith(_UNPICKLED_CONSTANTS):
            findings.append(Finding(f"constant {fqn!r} ({path_name})", name,
                                    "is a pickled object that loading would unpickle (run)"))
        if not dotted_name(fqn):
            findings.append(Finding(f"the name {fqn[:80]!r}", name,
                                    "is not a dotted Python name; torch writes such names "
                                    "into the code it generates"))
    return findings


def archive_findings(path: Path) -> list[Finding]:
    """What a TorchScript archive would run while it loads, or could hide from the scan."""
    with _torch_reader(path) as reader:
        names = list(reader.get_all_records())
        findings = _clashes(names)
        for name in names:
            lower = name.lower()
            if lower.endswith(".py"):
                findings.extend(_source_findings(reader, name))
            elif lower.endswith(".pkl") and not lower.endswith(".debug_pkl"):
                findings.extend(_pickle_findings(reader, name))
    return findings


def _names_custom_class(reader: Any, name: str) -> list[Finding]:
    """A custom C++ class named anywhere in a member (a pickle cannot build the name from
    parts, and a class attribute's type names it in the code)."""
    if CUSTOM_CLASS_PREFIX.encode()[len("__torch__."):] not in bytes(reader.get_record(name)):
        return []
    return [Finding("torch.classes", name,
                    "names a custom C++ class, whose code runs while the file loads (its "
                    "__setstate__) and cannot be checked")]


def _source_findings(reader: Any, name: str) -> list[Finding]:
    size = reader.get_record_size(name)
    if size > MAX_SOURCE_BYTES:
        return [Finding(f"{size} bytes of code", name,
                        "is more than any model's code holds; it was not read")]
    if b"__setstate__" in bytes(reader.get_record(name)):
        return [Finding("__setstate__", name,
                        "runs while the file loads, before its code can be checked")]
    return _names_custom_class(reader, name)


def _pickle_findings(reader: Any, name: str) -> list[Finding]:
    if reader.get_record_size(name) > MAX_SOURCE_BYTES:
        return [Finding("an oversized pickle", name, "is more than any model's structure")]
    try:
        globals_ = pickle_globals(bytes(reader.get_record(name)))
    except BadInputError:
        globals_ = []  # torch.jit.load reports a corrupt pickle in its own words
    named = [Finding(g.replace(" ", "."), name,
                     "is a custom C++ class, whose code runs while the file loads and cannot "
                     "be checked")
             for g in globals_ if g.startswith(CUSTOM_CLASS_PREFIX.rstrip("."))]
    return named or _names_custom_class(reader, name)
