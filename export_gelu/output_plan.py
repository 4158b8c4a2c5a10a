"""Which files will this run write, and may it? One answer for every command (export, verify,
`--compare-forms`, device verify), from its options record and the files it reads, given
before any work by `options.validate` (rules: docs/outputs.md).

Paths are compared after resolving them (symlinks and `..`; `os.path.samefile` where both
exist, so a hard link, or another spelling on a case-insensitive file system, is the same
file). A run is refused (BadInputError, exit 2, naming both flags) when

- an output is a file the run reads (MODEL, its external data, DEPLOYED, `--inputs`, ...);
- something the run reads lies inside a folder it replaces (`--bundle DIR`);
- two outputs are the same file, or one lies inside the other (any output inside `--bundle
  DIR`: the bundle folder holds the bundle's files only);
- an output cannot be written (its folder is missing or read-only, it is a folder);
- `--bundle DIR` exists, is not empty and is not an export-gelu bundle, or holds a file of
  the user's where the new bundle writes one (device/bundle_layout.py: check_bundle_dir).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from export_gelu.atomic import check_output_path
from export_gelu.check.inputs.saved_data import check_json_path
from export_gelu.device.bundle_layout import (
    FIXED_FILES,
    check_bundle_dir,
    own_files,
    read_manifest,
)
from export_gelu.errors import BadInputError
from export_gelu.exporter.hf.folder import folder_reads, is_hf_folder, planned_files
from export_gelu.exporter.model_files.detect import MAX_ONNX_PROTO_BYTES
from export_gelu.onnx_file import read_structure
from export_gelu.onnx_weights import all_tensors, is_external
from export_gelu.options import ExportOptions, FormsOptions, RunOptions, VerifyOptions


@dataclass(frozen=True)
class PlannedPath:
    """One file (or folder) a run writes or reads, and how messages name it."""

    flag: str  # "-o", "--report-md's plot", "MODEL", ...
    path: Path  # as given
    group: str = ""  # one output and what it derives (-o and its .data): never compared
    folder: bool = False  # a folder the run replaces (--bundle DIR)
    new_folder: bool = False  # a file in a folder the run makes if missing (-o DIR/)


@dataclass(frozen=True)
class OutputPlan:
    """What a run writes and reads, checked (check_outputs)."""

    writes: tuple[PlannedPath, ...] = ()
    reads: tuple[PlannedPath, ...] = ()
    folder: Path | None = None  # a multi-graph export's output folder (-o DIR)

    def path(self, flag: str) -> Path | None:
        """The path written for `flag` (None when the run does not write it)."""
        return next((w.path for w in self.writes if w.flag == flag), None)


#: The PNG plots a Markdown report `r.md` writes beside it: `r.<suffix>`.
PLOT_SUFFIXES = {"forms": "gelu-forms.png", "errors": "errors.png",
                 "depth": "error-by-depth.png", "device_forms": "device-forms.png"}


def plot_paths(out: Path) -> dict[str, Path]:
    """Where the plots of the Markdown report `out` go (each written when it has data)."""
    return {key: out.with_name(f"{out.stem}.{suffix}") for key, suffix in PLOT_SUFFIXES.items()}


def default_output(model: Path, target: str, folder: bool = False,
                   dynamic: bool = False) -> Path:
    """`model.pt` → `model.<target>.onnx` beside it (export without -o), and
    `model.<target>.dynamic.onnx` for an export with `--dynamic` ranges, so a static and a
    dynamic export of one model never replace each other; a multi-graph export's folder:
    `my-t5/` → `my-t5.<target>/`. A path without a name of its own (`.`, `..`, `m/..`) is
    named by the folder it stands for."""
    if model.name in ("", ".", "..") or model.name.endswith(".."):
        model = Path(os.path.abspath(model))
    if folder:
        return model.with_name(f"{model.name}.{target}")
    kind = ".dynamic" if dynamic else ""
    return model.with_name(f"{model.stem}.{target}{kind}.onnx")


def names_folder(output: str | Path) -> bool:
    """`-o DIR/` (a trailing slash) or `-o DIR` (an existing folder): the output goes into it."""
    text = os.fspath(output)
    if text.endswith(("/", os.sep)):
        return True
    try:
        return Path(text).is_dir()
    except OSError:  # a name too long to look up is a file name the name checks refuse
        return False


def export_output(options: ExportOptions, model: Path) -> Path:
    """The graph file a one-graph export writes: `-o FILE`; `-o DIR/` → DIR/<default name>;
    no -o → the default name beside MODEL (default_output)."""
    default = default_output(model, options.target, dynamic=bool(options.dynamic))
    if not options.output:
        return default
    if names_folder(options.output):
        return Path(options.output) / default.name
    return Path(options.output)


def graph_files(options: RunOptions, model: Path) -> list[str]:
    """The graph files a multi-graph export of a Hugging Face folder writes ([]: one graph)."""
    if not isinstance(options, ExportOptions) or not is_hf_folder(model):
        return []
    return planned_files(model, options.task, options.allow_pickle)


def check_output_folder(folder: Path, flag: str) -> None:
    """A folder the run writes its graphs into: an existing folder, or one it can make."""
    if folder.exists() and not folder.is_dir():
        raise BadInputError(f"{flag} {folder} is a file; this export writes several graphs: "
                            "give a folder")
    if not folder.exists():
        parent = folder.parent
        if not parent.is_dir():
            raise BadInputError(f"{flag} {folder}: its parent {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise BadInputError(f"{flag} {folder}: its parent {parent} is not writable")


def data_file(out: Path) -> Path:
    """Where an ONNX output's external data goes (saving/save.py: `<name>.data` beside it)."""
    return out.with_name(out.name + ".data")


def calibration_cache_file(out: Path) -> Path:
    """Where a TensorRT 7.x INT8 export without `--bundle` writes its calibration cache:
    `out.onnx` → `out.calibration.cache` beside it (`trtexec --int8 --calib=` reads it)."""
    return out.with_name(f"{out.stem if out.suffix else out.name}.calibration.cache")


def writes_calibration_cache(o: RunOptions) -> bool:
    """An INT8 export for TensorRT 7.x (no explicit Q/DQ: an fp32 graph and a calibration
    cache) without `--bundle`, whose cache goes beside the graph."""
    if not isinstance(o, ExportOptions) or o.precision != "int8" or o.bundle:
        return False
    from export_gelu.errors import ExportGeluError
    from export_gelu.quantize.routes import CALIBRATION_CACHE, route_for
    from export_gelu.targets import resolve_target

    try:
        return route_for(resolve_target(o.target)[0], "int8").kind == CALIBRATION_CACHE
    except ExportGeluError:  # the target is refused where the options are checked
        return False


def onnx_data_files(path: Path) -> list[Path]:
    """The external-data files an ONNX file names; none for another kind of file or one that
    does not parse (loading it says why). Parsed once, without the weights; torch archives
    and pickles (by their first bytes) and files too big for protobuf are not parsed."""
    try:
        with path.open("rb") as fh:
            head = fh.read(2)
        if head == b"PK" or head[:1] == b"\x80" or path.stat().st_size > MAX_ONNX_PROTO_BYTES:
            return []
        model = read_structure(path)
    except Exception:  # noqa: BLE001 - not ours to refuse here: load_model does, by name
        return []
    found: list[Path] = []
    for tensor in all_tensors(model) if model.HasField("graph") else ():
        location = {e.key: e.value for e in tensor.external_data}.get("location")
        if not is_external(tensor) or not location or "\x00" in location:
            continue  # no file of that name can exist (load_model refuses the model)
        if path.parent / location not in found:
            found.append(path.parent / location)
    return found


def check_outputs(options: RunOptions, model: str | Path, *, deployed: str | Path | None = None,
                  device_outputs: str | Path | None = None,
                  device_times: str | Path | None = None) -> OutputPlan:
    """Every file the run described by `options` writes, checked against what it reads, against
    each other and against what exists (module docstring). `device_outputs`: device verify,
    where `--bundle` is read, not written."""
    model_path = Path(model)
    deployed_path = Path(deployed) if deployed is not None else None
    reads = list(_reads(options, model_path, deployed_path, device_outputs, device_times))
    bundle_new: list[str] = []
    files = graph_files(options, model_path)
    writes = list(_writes(options, model_path, deployed_path, device_outputs is not None,
                          bundle_new, files))
    _refuse_overwritten_inputs(writes, reads)
    _refuse_overlapping_outputs(writes)
    for w in writes:
        if w.folder:
            check_bundle_dir(w.path, bundle_new)
        elif w.new_folder and not w.path.parent.is_dir():
            check_output_folder(w.path.parent, w.flag.split("'")[0])
        else:
            if w.flag in ("--save-inputs", "--save-outputs"):
                check_json_path(w.path, w.flag)
            # a .data is written only for big weights; save checks its name then
            check_output_path(w.path, [], check_name=not w.flag.endswith("'s .data"))
    folder = next((w.path.parent for w in writes if w.new_folder), None) if files else None
    if folder is not None:
        check_output_folder(folder, "-o")
    return OutputPlan(tuple(writes), tuple(reads), folder)


def _reads(o: RunOptions, model: Path, deployed: Path | None, device_outputs: str | Path | None,
           device_times: str | Path | None) -> Iterator[PlannedPath]:
    yield PlannedPath("MODEL", model)
    if model.is_dir():  # a Hugging Face folder: every file its load reads, shards included
        yield from (PlannedPath("MODEL's file", p) for p in folder_reads(model))
    else:
        yield from (PlannedPath("MODEL's external data", p) for p in onnx_data_files(model))
    if deployed is not None:
        yield PlannedPath("DEPLOYED", deployed)
        yield from (PlannedPath("DEPLOYED's external data", p) for p in onnx_data_files(deployed))
    given = getattr(o, "inputs_npz", None) or getattr(o, "inputs_file", None)
    if given:
        yield PlannedPath("--inputs", Path(given))
    if device_outputs is not None:
        yield PlannedPath("--device-outputs", Path(device_outputs))
    if device_times is not None:
        yield PlannedPath("--device-times", Path(device_times))
    bundle = getattr(o, "bundle", None)
    if device_outputs is not None and bundle and (Path(bundle) / "manifest.json").is_file():
        try:
            own = own_files(read_manifest(bundle))
        except BadInputError:
            own = set()  # device verify reads it and says why it is no bundle
        yield from (PlannedPath("--bundle's file", Path(bundle) / f) for f in sorted(own))


def _writes(o: RunOptions, model: Path, deployed: Path | None, bundle_read: bool,
            bundle_new: list[str], files: Sequence[str] = ()) -> Iterator[PlannedPath]:
    """What `o` writes; `bundle_new` receives the files a new bundle holds (relative);
    `files`: a multi-graph export's graphs, written into the -o folder."""
    if isinstance(o, ExportOptions) and files:
        folder = Path(o.output) if o.output else default_output(model, o.target, folder=True)
        flag = "-o" if o.output else "the default output"
        for name in files:
            yield PlannedPath(f"{flag}'s {name}", folder / name, group="-o", new_folder=True)
            yield PlannedPath(f"{flag}'s {name}.data", data_file(folder / name), group="-o",
                              new_folder=True)
            if writes_calibration_cache(o):
                yield PlannedPath(f"{flag}'s {name} calibration cache",
                                  calibration_cache_file(folder / name), group="-o",
                                  new_folder=True)
    elif isinstance(o, ExportOptions):
        out = export_output(o, model)
        flag = "-o" if o.output else "the default output"
        into = bool(o.output and names_folder(o.output))  # -o DIR/: made if missing
        yield PlannedPath(flag, out, group="-o", new_folder=into)
        yield PlannedPath(f"{flag}'s .data", data_file(out), group="-o", new_folder=into)
        bundle_new += [data_file(out).name]
        if writes_calibration_cache(o):
            yield PlannedPath(f"{flag}'s calibration cache", calibration_cache_file(out),
                              group="-o", new_folder=into)
    yield from _report_paths(o)
    if isinstance(o, VerifyOptions):
        for flag, path in (("--save-inputs", o.save_inputs), ("--save-outputs", o.save_outputs),
                           ("-o", o.output)):
            if path:
                yield PlannedPath(flag, Path(path))
        if deployed is not None:
            bundle_new += [Path(os.path.relpath(p, deployed.parent)).as_posix()
                           for p in onnx_data_files(deployed)]
    if isinstance(o, ExportOptions) and o.engine:
        yield PlannedPath("--engine", Path(o.engine))
    bundle = getattr(o, "bundle", None)
    if bundle and not bundle_read:
        bundle_new += list(FIXED_FILES)
        yield PlannedPath("--bundle", Path(bundle), group="--bundle", folder=True)


def _report_paths(o: RunOptions) -> Iterator[PlannedPath]:
    if not isinstance(o, (ExportOptions, VerifyOptions, FormsOptions)):
        return
    if o.report:
        yield PlannedPath("--report", Path(o.report))
    if o.report_md:
        yield PlannedPath("--report-md", Path(o.report_md), group="--report-md")
        for png in plot_paths(Path(o.report_md)).values():
            yield PlannedPath("--report-md's plot", png, group="--report-md")


def _key(path: Path) -> Path:
    return Path(os.path.normcase(os.path.realpath(path)))


def _same(a: Path, b: Path) -> bool:
    if _key(a) == _key(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet)
        return False


def _inside(path: Path, folder: Path) -> bool:
    return _key(folder) in _key(path).parents


def _refuse_overwritten_inputs(writes: Sequence[PlannedPath], reads: Sequence[PlannedPath]
                               ) -> None:
    for w in writes:
        for r in reads:
            if _same(w.path, r.path):
                raise BadInputError(f"{w.flag} {w.path} would overwrite the input {r.flag} "
                                    f"({r.path}); write it elsewhere")
            if w.folder and _inside(r.path, w.path):
                raise BadInputError(f"the input {r.flag} {r.path} lies inside {w.flag} "
                                    f"{w.path}, a folder this run replaces; move it out or "
                                    f"give {w.flag} another folder")


def _refuse_overlapping_outputs(writes: Sequence[PlannedPath]) -> None:
    for i, a in enumerate(writes):
        for b in writes[i + 1:]:
            if a.group and a.group == b.group:
                continue
            if _same(a.path, b.path):
                raise BadInputError(f"{a.flag} and {b.flag} name the same file {b.path}")
            for inner, outer in ((a, b), (b, a)):
                if _inside(inner.path, outer.path):
                    what = ("a folder this run replaces with the bundle's own files"
                            if outer.folder else "a file this run writes")
                    raise BadInputError(f"{inner.flag} {inner.path} lies inside {outer.flag} "
                                        f"{outer.path}, {what}; write it elsewhere")
