"""What a device bundle holds: its fixed files, the files its script writes, the manifest, which
entries of a folder are a bundle's own, and whether a folder may take a bundle."""

from __future__ import annotations

import hashlib
import os
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from export_gelu.device import script as ds
from export_gelu.errors import BadInputError
from export_gelu.shown import shown
from export_gelu.untrusted_files import UntrustedFolder

if TYPE_CHECKING:
    pass


MANIFEST = "manifest.json"


BUNDLE_FORMAT = "export-gelu device bundle"


#: 2: the manifest lists the bundle's own `files` and the `device_files` its script writes.
BUNDLE_VERSION = 2


GRAPH = "model.onnx"


INPUTS_DIR = "inputs"


#: Every bundle's files besides the graph's external data and inputs/<name>.bin.
FIXED_FILES = (GRAPH, "inputs.npz", "inputs.json", "reference_outputs.json", MANIFEST,
               "run_on_device.sh", "README.txt")


#: What run_on_device.sh writes into the bundle (the engine, the device's outputs, times and
#: log, copied back there): results of this bundle's graph, so they go when it is replaced.
DEVICE_FILES = ("model.plan", "outputs.json", "times.json", "trtexec.log", "trtexec.rc",
                ds.MODULE_OUTPUTS, "localize.log")


def sha256_file(path: Path) -> str:
    """A file's SHA-256; a folder's (a Hugging Face model) over its files' names and bytes."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        with file.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):  # noqa: B023 - used at once
                digest.update(block)
    return digest.hexdigest()


def check_bundle_dir(path: str | Path, new_files: Sequence[str] = ()) -> Path:
    """DIR may not exist yet, be empty, or be an earlier bundle (replaced: its own files go,
    every other entry stays); anything else is refused (exit 2). `new_files`: the files the new
    bundle writes, relative to DIR; an entry of an earlier bundle that is not its own may not
    stand where one of them (or inputs/) goes. Refused too: the working directory or one
    holding it (`--bundle .`: the folder is swapped for the new one, which would leave the
    shell in a deleted folder) and a mount point (which cannot be renamed)."""
    given = Path(path)
    path = Path(os.path.abspath(path)) if given.name in ("", ".", "..") else given
    if not path.name:
        raise BadInputError(f"--bundle {given}: not a directory that can be replaced")
    cwd = Path(os.path.abspath(os.getcwd()))
    full = Path(os.path.abspath(path))
    if full == cwd or full in cwd.parents:
        raise BadInputError(f"--bundle {given}: is the working directory or holds it, and the "
                            "bundle is written beside it and swapped into place; give "
                            "another directory, or run from outside this one")
    if not path.parent.is_dir():
        raise BadInputError(f"--bundle {path}: directory {path.parent} does not exist")
    if path.exists():
        if not path.is_dir():
            raise BadInputError(f"--bundle {path}: exists and is not a directory")
        if os.path.ismount(path):
            raise BadInputError(f"--bundle {path}: is a mount point, and the bundle is swapped "
                                "into place; give a directory inside it")
        try:
            filled = any(path.iterdir())
        except OSError as exc:
            raise BadInputError(f"--bundle {path}: cannot read it ({exc.strerror or exc})"
                                ) from exc
        if filled:
            own = own_files(_manifest_to_replace(path))
            taken = set(new_files) | set(FIXED_FILES)
            clash = sorted(f for f in entries_under(path) if not is_own(f, own) and (
                f in taken or (f.split("/")[0] == INPUTS_DIR and not (path / f).is_dir())))
            if clash:
                raise BadInputError(f"--bundle {path}: {', '.join(clash)} is not one of the "
                                    "earlier bundle's own files (its manifest does not list it) "
                                    "and the new bundle writes there; move it out")
    if not os.access(path.parent, os.W_OK):
        raise BadInputError(f"--bundle {path}: {path.parent} is not writable")
    return path


def _manifest_to_replace(path: Path) -> dict[str, Any]:
    """The manifest of the non-empty folder `path`, which must be an export-gelu bundle's."""
    if not (path / MANIFEST).is_file():
        raise BadInputError(f"--bundle {path}: exists, is not empty and is not an export-gelu "
                            f"bundle (no {MANIFEST}); give a new or empty directory")
    try:
        return read_manifest(path)
    except BadInputError as exc:
        raise BadInputError(f"{exc}; the folder is left as it is: give a new or empty "
                            "directory") from None


def own_files(manifest: Mapping[str, Any]) -> set[str]:
    """The files of a bundle, relative to its folder: those its manifest lists (`files`; a
    version-1 manifest's are named by its graph, inputs and reference entries) and those its
    run_on_device.sh writes (`device_files`). Paths leaving the folder are never its own."""
    listed = manifest.get("files")
    if not isinstance(listed, list):  # bundle_version 1
        graph, ref = manifest.get("graph") or {}, manifest.get("reference") or {}
        listed = [*FIXED_FILES, *(graph.get("external_data") or []), ref.get("file"),
                  *(r.get("file") for r in manifest.get("inputs") or [] if isinstance(r, dict))]
    device = manifest.get("device_files")
    device = device if isinstance(device, list) else list(DEVICE_FILES)
    own = set()
    for name in [*listed, *device]:
        if isinstance(name, str) and name:
            rel = Path(name)
            if not rel.is_absolute() and ".." not in rel.parts:
                own.add(rel.as_posix())
    return own


def is_own(rel: str, own: set[str]) -> bool:
    """Whether the entry `rel` is one of `own`, or lies in a folder that is (a forms bundle's
    `outputs/`, whose files the device names)."""
    return rel in own or any(p.as_posix() in own for p in Path(rel).parents)


def entries_under(folder: Path) -> list[str]:
    """Every entry below `folder` that is not a directory (symlinks as themselves), and every
    empty directory, as relative POSIX paths. A folder that cannot be read is refused: what
    is in it could not be kept."""
    def refuse(exc: OSError) -> None:
        raise BadInputError(f"--bundle {folder}: cannot read {exc.filename} "
                            f"({exc.strerror or exc}); a bundle folder must be readable")

    found = []
    for root, dirs, files in os.walk(folder, onerror=refuse):
        rel = Path(root).relative_to(folder)
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        dirs[:] = [d for d in dirs if d not in links]
        found += [(rel / f).as_posix() for f in [*files, *links]]
        if not dirs and not files and not links and rel != Path("."):
            found.append(rel.as_posix())
    return found


#: An input name kept as its raw file's name: letters, digits, `_`, `-`, `.`, not first.
_FILE_STEM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}")


def input_files(names: Sequence[str]) -> OrderedDict[str, str]:
    """Each input's raw file in the bundle: `inputs/<name>.bin` where the name is a plain
    file name (`input_ids`), else `inputs/input_<i>.bin` (its position). A model's names are
    data, never path parts: `../../x` is input_0; two names one file system could fold
    together (`X`, `x`) get one file each. The manifest records the mapping (`inputs[].file`)."""
    files: OrderedDict[str, str] = OrderedDict()
    taken: set[str] = set()
    for i, name in enumerate(names):
        stem = name if _FILE_STEM.fullmatch(name) else f"input_{i}"
        while stem.lower() in taken:
            stem = f"input_{i}" if stem != f"input_{i}" else f"input_{i}_{len(taken)}"
        taken.add(stem.lower())
        files[name] = f"{INPUTS_DIR}/{stem}.bin"
    return files


def read_manifest(bundle: str | Path) -> dict[str, Any]:
    """The bundle's manifest, read as every file of a bundle is (untrusted_files.py: inside
    the folder, no link, bounded size and nesting) and checked for form and for every field
    a verify reads (device/manifest_checks.py); exit 2 when it is not a bundle's."""
    from export_gelu.device.manifest_checks import check_manifest

    folder = UntrustedFolder(bundle, "--bundle", "bundle")
    if not folder.is_file(MANIFEST):
        raise BadInputError(f"--bundle {bundle}: no {MANIFEST} (not an export-gelu bundle)")
    data = folder.read_json(MANIFEST)
    if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT:
        raise BadInputError(f"--bundle {bundle}: {MANIFEST} is not an export-gelu bundle "
                            "manifest")
    version = data.get("bundle_version")
    if type(version) is not int or not 1 <= version <= BUNDLE_VERSION:
        raise BadInputError(f"--bundle {bundle}: {MANIFEST} has bundle_version "
                            f"{shown(repr(version), 40)}; this export-gelu reads 1 to "
                            f"{BUNDLE_VERSION} (a newer export-gelu wrote it?)")
    return check_manifest(data, folder.where(MANIFEST))
