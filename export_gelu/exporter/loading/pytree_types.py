"""Which Python types an ExportedProgram archive's input/output pytrees name, and making them
known to torch before loading.

`torch.export.save` records the tree of a model's inputs and outputs by type name
(`transformers.modeling_outputs.BaseModelOutput`, `builtins.tuple`, …). `torch.export.load`
can rebuild it only when that type is registered as a pytree node in this process, which a
library does when it is imported (transformers registers every `ModelOutput` subclass in
`ModelOutput.__init_subclass__`). So before loading, the archive's `models/*.json` is read
(plain JSON, no code runs) and the modules that define those types are imported, but only
for packages we trust to import by name (`TRUSTED_PACKAGES`) or that the user named with
`--import`: a file never chooses what code runs.
"""

from __future__ import annotations

import importlib
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from export_gelu.bounded_json import parse_json
from export_gelu.errors import BadInputError

#: Libraries whose pytree types (model output objects) are imported when an archive names them.
TRUSTED_PACKAGES = ("transformers", "diffusers")
#: Types torch registers itself.
_BUILTIN_PREFIXES = ("builtins.", "collections.", "torch.")
#: Largest model JSON read to find the type names (the graph itself is in it).
_MAX_JSON = 256 << 20


def _spec_types(node: object) -> Iterator[str]:
    """Every `type` named in a serialized treespec (nested dicts with `children_spec`)."""
    if isinstance(node, dict):
        kind = node.get("type")
        if isinstance(kind, str):
            yield kind
        for child in node.get("children_spec") or ():
            yield from _spec_types(child)


def _treespec(text: object) -> object:
    """A serialized treespec string (`[protocol, {...}]`) as JSON, or None."""
    try:
        value = parse_json(text, "a treespec") if isinstance(text, str) else text
    except BadInputError:
        return None
    return value[1] if isinstance(value, list) and len(value) == 2 else value


def archive_pytree_types(path: Path) -> list[str]:
    """Type names in the archive's input/output treespecs (builtins and torch left out)."""
    found: list[str] = []
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                name = info.filename.split("/", 1)[-1]
                if not (name.startswith("models/") and name.endswith(".json")) or \
                        info.file_size > _MAX_JSON:
                    continue
                doc = parse_json(zf.read(info), info.filename, max_bytes=_MAX_JSON)
                calls = (doc.get("graph_module") or {}).get("module_call_graph") or []
                for call in calls:
                    sig = call.get("signature") or {}
                    for key in ("in_spec", "out_spec"):
                        for kind in _spec_types(_treespec(sig.get(key))):
                            if not kind.startswith(_BUILTIN_PREFIXES) and kind not in found:
                                found.append(kind)
    except (zipfile.BadZipFile, OSError, ValueError, AttributeError, BadInputError):
        return []  # the loader reports a broken archive in its own words
    return found


def _import_defining_module(type_name: str) -> str | None:
    """Import the longest importable module prefix of `type_name`; the error text, or None."""
    parts = type_name.split(".")
    error = None
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        try:
            importlib.import_module(module)
            return None
        except ImportError as exc:
            error = error or f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - a broken library install
            return f"{type(exc).__name__}: {exc}"
    return error


def import_user_modules(modules: Sequence[str]) -> None:
    """`--import MODULE`: modules the user names, imported so their pytree types register."""
    from export_gelu.exporter.loading.user_code import import_user_module

    for module in modules:
        import_user_module(module)  # from the working directory, or a script's path


def register_archive_types(path: Path, user_modules: Sequence[str] = ()) -> list[str]:
    """Import what `path`'s pytree types need; notes for the report. Raises BadInputError
    naming the package to install (or to `--import`) when a type cannot be made known."""
    import_user_modules(user_modules)
    notes: list[str] = []
    imported: list[str] = []
    for kind in archive_pytree_types(path):
        package = kind.split(".", 1)[0]
        if _registered(kind):
            continue
        if package not in TRUSTED_PACKAGES:
            raise BadInputError(
                f"{path}: the ExportedProgram's inputs or outputs are a {kind}, a type from "
                f"{package!r}; pass --import {kind.rsplit('.', 1)[0]} to import the module "
                "that defines it (export-gelu imports only transformers and diffusers by itself)")
        error = _import_defining_module(kind)
        if error is not None or not _registered(kind):
            why = f" ({error})" if error else ""
            raise BadInputError(
                f"{path}: the ExportedProgram returns a {kind}; loading it needs {package} "
                f"installed{why}: pip install {package}")
        if package not in imported:
            imported.append(package)
    if imported:
        notes.append(f"imported {', '.join(imported)} to rebuild the model's output object")
    return notes


def _registered(type_name: str) -> bool:
    """Whether torch's pytree knows `type_name` as a serialized type."""
    from torch.utils import _pytree

    return type_name in _pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE
