"""`--bundle DIR`: everything a TensorRT box that export-gelu cannot drive needs to build the
engine, run it on our inputs and hand back what it produced (see docs/device-verification.md).

DIR holds model.onnx (+ its external data), inputs/<name>.bin (raw, little-endian, in the
dtype the device's engine binds), inputs.json (polygraphy), inputs.npz (the feed as the graph
takes it), reference_outputs.json (the reference's outputs, polygraphy RunResults),
manifest.json, run_on_device.sh and README.txt. The directory is staged beside DIR and swapped
into place. An existing bundle there is replaced, and only its own files go (those its manifest
lists, and those its run_on_device.sh writes): every other entry is kept. A folder that is not
empty and not an export-gelu bundle is refused (docs/outputs.md).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import zipfile
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from export_gelu.atomic import placed, signals_deferred, staging_dir
from export_gelu.device import script as ds
from export_gelu.errors import BadInputError
from export_gelu.notes import Note
from export_gelu.shown import shown
from export_gelu.trt_parser.versions import in_range
from export_gelu.untrusted_files import UntrustedFolder

if TYPE_CHECKING:
    from export_gelu.check.parity import ParityResult

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

#: TensorRT binds ONNX int64 inputs as int32 before 9 (DataType::kINT64 first appears in
#: NVIDIA/TensorRT v9.1.0 include/NvInferRuntimeBase.h); from 9 they bind as int64.
INT64_BINDING_SINCE = "9"
#: TensorRT has no float64 type: from 8.0 its ONNX parser reads DOUBLE inputs and weights as
#: FLOAT (onnx-tensorrt convertDtype, DOUBLE → kFLOAT; 7.x refuses DOUBLE, the
#: `double-tensors` restriction), so a float64 graph is bound and computed in float32 there.
DOUBLE_AS = "float32"
FLOAT64_ON_TRT = ("a float64 graph on TensorRT: the parser reads DOUBLE as FLOAT, so the device "
                  "binds its inputs and computes in float32; the bundle records fp32's "
                  "tolerances (the check here ran in float64); --cast-down exports a float32 "
                  "graph instead")

Shape = tuple[int, ...]
Profile = dict[str, tuple[Shape, Shape, Shape]]


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
            clash = sorted(f for f in _entries_under(path) if not is_own(f, own) and (
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


def _entries_under(folder: Path) -> list[str]:
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


def binding_dtype(onnx_dtype: str, trt_version: str) -> str:
    """The dtype name TensorRT `trt_version` binds an ONNX input of `onnx_dtype` as."""
    if onnx_dtype == "int64" and not in_range(trt_version, since=INT64_BINDING_SINCE):
        return "int32"
    if onnx_dtype == "float64":
        return DOUBLE_AS
    return onnx_dtype


def device_precision(precision: str) -> str:
    """The precision TensorRT computes a graph checked here at `precision` in: a float64
    graph's (fp64) in fp32, since the parser reads DOUBLE as FLOAT; others as they are."""
    return "fp32" if precision == "fp64" else precision


def raw_bytes(arr: np.ndarray, dtype: str) -> bytes:
    """`arr` as trtexec --loadInputs reads it: C order, little-endian, `dtype` elements."""
    if dtype == "bfloat16":
        bits = np.ascontiguousarray(arr, dtype="<f4").view("<u4").astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        return rounded.astype("<u2").tobytes()
    want = np.dtype(dtype).newbyteorder("<")
    if arr.dtype.kind in "iu" and want.kind in "iu":
        info = np.iinfo(want)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise BadInputError(f"input values outside {dtype}'s range cannot be bound as "
                                f"{dtype} (TensorRT before {INT64_BINDING_SINCE} binds int64 "
                                "as int32)")
    return np.ascontiguousarray(arr).astype(want).tobytes()


def save_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """What `np.savez(path, **arrays)` writes, also for arrays named `file` or `allow_pickle`
    (np.savez's own parameters: the first raised TypeError, the second was left out)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr))


def read_raw(path: Path, dtype: str, shape: Sequence[int]) -> np.ndarray:
    """A raw input file back as an array (bfloat16 widened to float32)."""
    if dtype == "bfloat16":
        bits = np.fromfile(path, dtype="<u2").astype(np.uint32) << 16
        return bits.view("<f4").reshape(shape)
    return np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)


def profile_shapes(shapes: Mapping[str, Shape], dynamic: Sequence[Any],
                   symbolic: Mapping[str, bool]) -> Profile | None:
    """MIN/OPT/MAX per input: `dynamic` (DynamicAxis records: name, axis, min, opt, max)
    ranges an axis; every other axis stays at the run shape. None when every input is static
    and nothing is ranged (then no shape flags are needed)."""
    if not dynamic and not any(symbolic.values()):
        return None
    out: Profile = {}
    for name, shape in shapes.items():
        axes = {d.axis % len(shape): d for d in dynamic if d.name == name} if shape else {}
        lo = tuple(axes[i].min if i in axes else s for i, s in enumerate(shape))
        opt = tuple(axes[i].opt if i in axes else s for i, s in enumerate(shape))
        hi = tuple(axes[i].max if i in axes else s for i, s in enumerate(shape))
        out[name] = (lo, opt, hi)
    return out


def _external_files(graph_path: Path) -> list[str]:
    import onnx

    model = onnx.load(str(graph_path), load_external_data=False)
    found: list[str] = []
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        loc = next((e.value for e in tensor.external_data if e.key == "location"), "")
        if loc and loc not in found:
            found.append(loc)
    for loc in found:
        rel = Path(loc)
        if rel.is_absolute() or ".." in rel.parts or not (graph_path.parent / rel).is_file():
            raise BadInputError(f"{graph_path}: external data {loc!r} is not a file beside it")
    return found


def _graph_info(graph_path: Path) -> tuple[OrderedDict[str, tuple[str, list[Any]]],
                                          OrderedDict[str, tuple[str, list[Any]]], bool, int]:
    """(inputs, outputs as name → (dtype, dims)), whether it holds the GELU plugin, opset."""
    import onnx

    from export_gelu.check.deployed import _onnx_dtype_name
    from export_gelu.parse_check import model_opset
    from export_gelu.trt_parser.plugin import PLUGIN_OP

    model = onnx.load(str(graph_path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}

    def describe(values: Any) -> OrderedDict[str, tuple[str, list[Any]]]:
        out: OrderedDict[str, tuple[str, list[Any]]] = OrderedDict()
        for vi in values:
            if vi.name in inits:
                continue
            tt = vi.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                    for d in tt.shape.dim]
            out[vi.name] = (_onnx_dtype_name(tt.elem_type), dims)
        return out

    plugin = any(n.op_type == PLUGIN_OP for n in model.graph.node)
    return describe(model.graph.input), describe(model.graph.output), plugin, model_opset(model)


@dataclass
class BundleRequest:
    """What a bundle is made of (all known after export or a local verify)."""

    model_path: Path
    graph_path: Path
    target: str
    trt_version: str
    precision: str
    feed: Mapping[str, np.ndarray]  # the graph's inputs, as it takes them
    reference: Mapping[str, np.ndarray]  # the reference's outputs on `feed`
    reference_name: str
    atol: float
    rtol: float
    dynamic: Sequence[Any] = ()
    fp32_layers: Sequence[str] = ()  # an fp16 graph's fp32 islands (parity.islands' nodes)
    #: the graph's module-boundary tensors (check.divergence.module_tensors): the device is
    #: asked for them too, from a copy of the graph that marks them as outputs
    module_tensors: Sequence[str] = ()
    #: an INT8/FP8 graph's trtexec precision flags (quantize/flags.py), in place of the
    #: float precision's; its TensorRT 7.x calibration cache (CALIBRATION_CACHE in the bundle)
    quantized_flags: Sequence[str] | None = None
    calibration_cache: str | None = None


#: The calibration cache's file in a bundle (`trtexec --calib=` reads it on the device).
CALIBRATION_CACHE = "calibration.cache"


def _write_reference(path: Path, name: str, outputs: Mapping[str, np.ndarray]) -> None:
    from polygraphy.comparator import RunResults
    from polygraphy.comparator.struct import IterationResult

    from export_gelu.check.quiet import quiet_polygraphy

    results = RunResults()
    results.append((name, [IterationResult(OrderedDict(outputs), runner_name=name)]))
    with quiet_polygraphy():
        results.save(str(path))


def _write_marked(stage: Path, outputs: list[str], tensors: list[str]) -> dict[str, Any]:
    """The bundle's graph with `tensors` marked as outputs too (polygraphy's ModifyOutputs),
    written beside it as MARKED_GRAPH; its weights stay in the graph's own external-data
    files. The manifest's `localize` entry, or {} when there is nothing to mark."""
    tensors = [t for t in tensors if t not in outputs]  # an output comes back anyway
    if not tensors:
        return {}
    import onnx
    from polygraphy.backend.onnx import ModifyOutputs

    from export_gelu.check.quiet import quiet_polygraphy

    model = onnx.load(str(stage / GRAPH), load_external_data=False)
    with quiet_polygraphy():
        marked = ModifyOutputs(model, outputs=[*outputs, *tensors])()
    onnx.save(marked, str(stage / ds.MARKED_GRAPH))
    return {"graph": ds.MARKED_GRAPH, "outputs": tensors, "file": ds.MODULE_OUTPUTS}


def write_bundle(req: BundleRequest, out_dir: str | Path) -> Path:
    """Write the bundle for `req` into `out_dir` (staged, then renamed); return it."""
    from export_gelu.check.saved_data import save_polygraphy_inputs
    from export_gelu.version import __version__

    out = check_bundle_dir(out_dir)
    real = Path(os.path.realpath(out))  # a symlinked DIR: the folder it names is replaced
    inputs, outputs, has_plugin, opset = _graph_info(req.graph_path)
    missing = [n for n in inputs if n not in req.feed]
    if missing:
        raise BadInputError(f"--bundle: the graph takes {', '.join(missing)}, which the feed "
                            "lacks")
    feed = OrderedDict((n, np.asarray(req.feed[n])) for n in inputs)
    shapes = {n: tuple(int(d) for d in a.shape) for n, a in feed.items()}
    symbolic = {n: any(not isinstance(d, int) or d <= 0 for d in dims)
                for n, (_t, dims) in inputs.items()}
    profile = profile_shapes(shapes, list(req.dynamic), symbolic)
    files = input_files(list(feed))
    float_precision = "fp32" if req.quantized_flags is not None else req.precision
    trtexec = ds.trtexec_args(req.trt_version, float_precision, files, shapes, profile,
                              req.fp32_layers)
    polygraphy = ds.polygraphy_args(float_precision, req.trt_version, profile, req.fp32_layers)
    if req.quantized_flags is not None:
        trtexec += list(req.quantized_flags)
        ds.check_flags(trtexec, req.trt_version)
        polygraphy += ds.quantized_polygraphy_args(req.quantized_flags, CALIBRATION_CACHE)
    externals = _external_files(req.graph_path)

    with staging_dir(real) as tmp:
        stage = tmp / "bundle"
        (stage / "inputs").mkdir(parents=True)
        shutil.copyfile(req.graph_path, stage / GRAPH)
        if req.calibration_cache is not None:
            (stage / CALIBRATION_CACHE).write_text(req.calibration_cache)
        for loc in externals:
            (stage / loc).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(req.graph_path.parent / loc, stage / loc)
        input_rows: list[dict[str, Any]] = []
        for name, arr in feed.items():
            onnx_dtype = inputs[name][0]
            bound = binding_dtype(onnx_dtype, req.trt_version)
            data = raw_bytes(arr, bound)
            (stage / files[name]).write_bytes(data)
            input_rows.append({"name": name, "onnx_dtype": onnx_dtype, "binding_dtype": bound,
                               "shape": list(shapes[name]), "graph_dims": inputs[name][1],
                               "file": files[name], "bytes": len(data),
                               "sha256": hashlib.sha256(data).hexdigest()})
        save_npz(stage / "inputs.npz", feed)
        bound_feed = OrderedDict((n, read_raw(stage / files[n], r["binding_dtype"], shapes[n]))
                                 for n, r in zip(feed, input_rows))
        save_polygraphy_inputs([bound_feed], stage / "inputs.json")
        _write_reference(stage / "reference_outputs.json", req.reference_name, req.reference)
        output_rows = [{"name": n, "onnx_dtype": t, "graph_dims": dims,
                        "shape": list(np.shape(req.reference[n])) if n in req.reference else None}
                       for n, (t, dims) in outputs.items()]
        int64 = [r["name"] for r in input_rows if r["onnx_dtype"] != r["binding_dtype"]]
        manifest = {
            "format": BUNDLE_FORMAT, "bundle_version": BUNDLE_VERSION,
            "tool": f"export-gelu {__version__}",
            "model": {"file": req.model_path.name, "sha256": sha256_file(req.model_path)},
            "graph": {"file": GRAPH, "sha256": sha256_file(stage / GRAPH),
                      "external_data": externals, "opset": opset,
                      "gelu_plugin": has_plugin},
            "target": req.target, "tensorrt": req.trt_version, "precision": req.precision,
            "inputs": input_rows, "outputs": output_rows,
            "profile": ({n: {"min": list(p[0]), "opt": list(p[1]), "max": list(p[2])}
                         for n, p in profile.items()} if profile else None),
            "tolerances": {"atol": req.atol, "rtol": req.rtol},
            "reference": {"runner": req.reference_name, "file": "reference_outputs.json"},
            "trtexec": {"args": trtexec, "warmup_ms": ds.WARMUP_MS,
                        "iterations": ds.ITERATIONS, "flags_from": ds.source_of(req.trt_version)},
            "polygraphy": {"args": polygraphy},
        }
        if req.calibration_cache is not None:  # read back by verify --device-outputs
            manifest["calibration_cache"] = {"file": CALIBRATION_CACHE, "sha256": sha256_file(
                stage / CALIBRATION_CACHE)}
        localize = _write_marked(stage, list(outputs), list(req.module_tensors))
        if localize:
            localize["trtexec"] = ds.localize_trtexec_args(trtexec)
            localize["polygraphy"] = ds.localize_polygraphy_args(polygraphy,
                                                                 localize["outputs"])
            manifest["localize"] = localize
        script = ds.run_script(req.trt_version, req.target, req.precision, trtexec, polygraphy,
                               has_plugin=has_plugin, tool_version=__version__,
                               localize=localize.get("trtexec", []))
        (stage / "run_on_device.sh").write_text(script)
        os.chmod(stage / "run_on_device.sh", 0o755)
        note = (f"Inputs {', '.join(int64)} are int64 in the graph; TensorRT "
                f"{req.trt_version} binds them as int32, so their .bin files hold int32.\n"
                if int64 else "")
        (stage / "README.txt").write_text(
            ds.readme(req.target, req.trt_version, req.model_path.name, note, has_plugin,
                      localize=bool(localize)))
        manifest["files"] = sorted([*_entries_under(stage), MANIFEST])
        manifest["device_files"] = list(DEVICE_FILES)
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _replace_dir(stage, real, tmp)
    return out


def _replace_dir(stage: Path, out: Path, tmp: Path) -> None:
    """Put `stage` at `out` in one step. An earlier bundle there gives way: its own files go
    (own_files); every other entry is hard-linked (copied where links fail) into `stage`
    first, so it exists throughout, then the two folders are swapped."""
    if out.is_dir():
        own = own_files(read_manifest(out)) if any(out.iterdir()) else set()
        _keep_entries(out, stage, own)
        shutil.copymode(out, stage)
    with signals_deferred():
        if not out.exists():
            os.replace(stage, out)
            placed(out)  # a new folder, all of it this run's: removed if the run fails
        elif not _exchange(stage, out):  # no atomic swap here: aside, in, and back on failure
            aside = tmp / "previous"
            os.replace(out, aside)
            try:
                os.replace(stage, out)
            except BaseException:
                os.replace(aside, out)
                raise


def _keep_entries(old: Path, stage: Path, own: set[str]) -> None:
    """Every entry of `old` that is not one of `own` into `stage`, at the same place (the
    folders made for them take their old permissions)."""
    ours = {p for p in stage.rglob("*") if p.is_dir()}
    for rel in _entries_under(old):
        if is_own(rel, own):
            continue
        src, dst = old / rel, stage / rel
        if src.is_dir() and not src.is_symlink() and dst.is_dir() and not dst.is_symlink():
            continue  # an empty folder the new bundle has too
        if os.path.lexists(dst):
            raise BadInputError(f"--bundle {old}: {rel} is not one of the earlier bundle's own "
                                "files and the new bundle writes there; move it out")
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            if src.is_symlink():
                os.symlink(os.readlink(src), dst)
            elif src.is_dir():
                dst.mkdir()
            else:
                _link_or_copy(src, dst)
        except OSError as exc:
            raise BadInputError(f"--bundle {old}: cannot keep {rel} in the new bundle "
                                f"({exc.strerror or exc}); move it out") from exc
    for made in sorted(p for p in stage.rglob("*") if p.is_dir() and not p.is_symlink()
                       and p not in ours):
        shutil.copystat(old / made.relative_to(stage), made, follow_symlinks=False)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        if not src.is_file():
            raise
        shutil.copy2(src, dst)  # another owner's file (protected_hardlinks), or no links


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 with RENAME_EXCHANGE); False where the
    system or the filesystem has no such call."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError, TypeError):  # no such call (or no C library by None)
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


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


def reference_outputs(parity: ParityResult | None, make_runner: Any,
                      feed: Mapping[str, np.ndarray]) -> tuple[str, OrderedDict[str, np.ndarray]]:
    """(runner name, outputs) of the reference on `feed`: from the parity run (`parity`, its
    verdict) when it ran on exactly this feed, else by running the reference once."""
    results = parity.run_results if parity is not None else None
    if parity is not None and results is not None and parity.iterations == 1:
        name, iterations = results[0]
        return name, OrderedDict((k, np.asarray(v)) for k, v in iterations[0].items())
    runner = make_runner()
    with runner:
        out = runner.infer(dict(feed), check_inputs=False)
    return runner.name, OrderedDict((k, np.asarray(v)) for k, v in out.items())


def note_bundle(report: Any, out: Path, model_path: Path, target: str, trt_version: str) -> None:
    """Say where the bundle is and what to run; the skipped-engine reason points at it."""
    report.trt["bundle"] = str(out)
    if report.trt.get("device"):  # no engine here: the bundle is the device route taken
        report.trt["device"] = f"build and check it on the device with the bundle in {out}/"
    report.notes.append(bundle_note(out, model_path, target, trt_version))


def bundle_note(out: Path, model_path: Path, target: str, trt_version: str) -> Note:
    """Where the bundle is, and the round trip: what to run on the device, what to bring back
    and the verify command that judges it."""
    return Note(
        f"device bundle for {target} written to {out}/: on the TensorRT {trt_version} box run "
        f"`sh run_on_device.sh` in it, copy outputs.json and times.json back into it, then "
        f"`export-gelu verify {model_path} --bundle {out} --device-outputs {out}/outputs.json "
        f"--device-times {out}/times.json`", "bundle-written")


def device_route(out: Path) -> str:
    """How a graph no engine of which can be built here is built and checked, once its
    bundle is written to `out`."""
    return f"build and check it on the device with the bundle in {out}/"
