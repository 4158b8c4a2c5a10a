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

import hashlib
import json
import os
import shutil
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from export_gelu.atomic import staging_dir
from export_gelu.device import script as ds
from export_gelu.errors import BadInputError
from export_gelu.notes import Note

if TYPE_CHECKING:
    from export_gelu.check.verdict.parity import ParityResult
from export_gelu.device.binding import binding_dtype, profile_shapes, raw_bytes, read_raw, save_npz
from export_gelu.device.bundle_layout import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    DEVICE_FILES,
    GRAPH,
    MANIFEST,
    check_bundle_dir,
    entries_under,
    input_files,
    sha256_file,
)
from export_gelu.device.bundle_place import replace_dir


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

    from export_gelu.check.runners.deployed import _onnx_dtype_name
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
    #: the graph's module-boundary tensors (check.localize.divergence.module_tensors): the device is
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

    from export_gelu.check.runners.quiet import quiet_polygraphy

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

    from export_gelu.check.runners.quiet import quiet_polygraphy

    model = onnx.load(str(stage / GRAPH), load_external_data=False)
    with quiet_polygraphy():
        marked = ModifyOutputs(model, outputs=[*outputs, *tensors])()
    onnx.save(marked, str(stage / ds.MARKED_GRAPH))
    return {"graph": ds.MARKED_GRAPH, "outputs": tensors, "file": ds.MODULE_OUTPUTS}


def write_bundle(req: BundleRequest, out_dir: str | Path) -> Path:
    """Write the bundle for `req` into `out_dir` (staged, then renamed); return it."""
    from export_gelu.check.inputs.saved_data import save_polygraphy_inputs
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
        manifest["files"] = sorted([*entries_under(stage), MANIFEST])
        manifest["device_files"] = list(DEVICE_FILES)
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        replace_dir(stage, real, tmp)
    return out


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
