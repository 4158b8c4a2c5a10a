"""`export-gelu verify MODEL --bundle DIR --device-outputs outputs.json [--device-times t.json]`:
judge what a device produced against the model, with the verdict, per-output errors, exit
codes and report of a local run (the device's outputs stand in for a runner's)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from export_gelu.errors import BadInputError
from export_gelu.options import VerifyOptions, validate
from export_gelu.progress import Progress
from export_gelu.report.report import Report

DEVICE_RUNNER = "tensorrt-device"


def recorded_runner(outputs: Sequence[OrderedDict[str, np.ndarray]], feed: dict[str, Any],
                    name: str = DEVICE_RUNNER) -> Any:
    """A polygraphy runner that answers the i-th inference with the i-th recorded outputs."""
    from polygraphy.backend.base import BaseRunner

    from export_gelu.check.torch_runner import dtype_metadata

    class Recorded(BaseRunner):
        def __init__(self) -> None:
            super().__init__(name=name, prefix="recorded-runner")
            self._meta = dtype_metadata(feed)
            self._next = 0

        def activate_impl(self) -> None:
            self._next = 0

        def get_input_metadata_impl(self) -> Any:
            return self._meta

        def infer_impl(self, feed_dict: dict[str, Any]) -> OrderedDict[str, np.ndarray]:
            if self._next >= len(outputs):
                raise RuntimeError(f"the device outputs hold {len(outputs)} iteration(s) only")
            out = outputs[self._next]
            self._next += 1
            self.inference_time = 0.0
            return OrderedDict(out)

        def deactivate_impl(self) -> None:
            pass

    return Recorded()


def _sha256(path: Path) -> str:
    from export_gelu.device.bundle import sha256_file

    return sha256_file(path)


def _from_bundle(bundle: Path, model_path: Path, deployed: Path | None
                 ) -> tuple[dict[str, Any], Path, list[OrderedDict[str, np.ndarray]]]:
    """(manifest, graph, feeds) of a bundle, after checking it belongs to MODEL."""
    from export_gelu.device.bundle import GRAPH, read_manifest
    from export_gelu.exporter.inputs import load_npz

    manifest = read_manifest(bundle)
    want = manifest.get("model", {}).get("sha256")
    if _sha256(model_path) != want:
        raise BadInputError(f"--bundle {bundle}: made from another model "
                            f"({manifest.get('model', {}).get('file')}, sha256 {str(want)[:12]}…),"
                            f" not {model_path.name} (sha256 {_sha256(model_path)[:12]}…)")
    graph = bundle / GRAPH
    if not graph.is_file() or _sha256(graph) != manifest.get("graph", {}).get("sha256"):
        raise BadInputError(f"--bundle {bundle}: {GRAPH} is missing or is not the graph the "
                            "manifest names (sha256 differs)")
    if deployed is not None and _sha256(deployed) != _sha256(graph):
        raise BadInputError(f"{deployed} is not the bundle's graph ({graph}); drop DEPLOYED "
                            "or give the bundle made from it")
    npz = bundle / "inputs.npz"
    if not npz.is_file():
        raise BadInputError(f"--bundle {bundle}: inputs.npz is missing")
    feed = OrderedDict(load_npz(npz))
    return manifest, graph, [feed]


def _check_pairing(outputs: list[OrderedDict[str, np.ndarray]], names: list[str],
                   path: Path, feeds: int) -> None:
    if len(outputs) != feeds:
        raise BadInputError(f"--device-outputs {path}: {len(outputs)} iteration(s) for "
                            f"{feeds} input feed(s)")
    got = list(outputs[0])
    missing = [n for n in names if n not in got]
    extra = [n for n in got if n not in names]
    if missing or extra:
        raise BadInputError(
            f"--device-outputs {path}: its outputs ({', '.join(got)}) are not the graph's "
            f"({', '.join(names)}): " + "; ".join(filter(None, [
                missing and f"missing {', '.join(missing)}",
                extra and f"not in the graph: {', '.join(extra)}"])) + " (another model?)")


def _check_shapes(parity: Any, path: Path) -> None:
    """Device and reference outputs must have the same shapes (exit 2 naming the output)."""
    (_r, ref_iters), (_d, dev_iters) = parity.run_results[0], parity.run_results[1]
    for ref, dev in zip(ref_iters, dev_iters):
        for name, arr in dev.items():
            if name in ref and tuple(np.shape(ref[name])) != tuple(np.shape(arr)):
                show = "x".join(map(str, np.shape(arr))) or "scalar"
                want = "x".join(map(str, np.shape(ref[name]))) or "scalar"
                raise BadInputError(f"--device-outputs {path}: output {name!r} is {show}, the "
                                    f"reference's is {want} (another model or other inputs?)")


def _cast_to_graph(outputs: list[OrderedDict[str, np.ndarray]], dtypes: dict[str, str]
                   ) -> list[OrderedDict[str, np.ndarray]]:
    """Device values (read as float64 text) in the graph's output dtypes where numpy has them."""
    cast = []
    for it in outputs:
        row: OrderedDict[str, np.ndarray] = OrderedDict()
        for name, arr in it.items():
            try:
                want = np.dtype(dtypes.get(name, "float32"))
            except TypeError:
                want = np.dtype(np.float32)  # bfloat16: compared as float32
            row[name] = arr.astype(want) if want.kind in "fiub" else arr
        cast.append(row)
    return cast


def verify_device(model: str | Path, *, device_outputs: str | Path,
                  bundle: str | Path | None = None, deployed: str | Path | None = None,
                  device_times: str | Path | None = None, inputs_file: str | Path | None = None,
                  precision: str | None = None, atol: float | None = None,
                  rtol: float | None = None, allow_pickle: bool = False,
                  model_factory: str | None = None, threads: int = 1,
                  report: str | Path | None = None, report_md: str | Path | None = None,
                  progress: Progress | None = None) -> Report:
    """Compare the outputs a device wrote (trtexec or polygraphy JSON) with MODEL's on the
    inputs it ran (the bundle's, or --inputs); return the report (exit 1 on a failure)."""
    from export_gelu.check.deployed import feed_for, open_deployed
    from export_gelu.check.latency import summarize
    from export_gelu.check.parity import compare_runners, default_tolerances
    from export_gelu.check.saved_data import load_inputs_file
    from export_gelu.check.verify import _reference
    from export_gelu.device.outputs import read_device_outputs, read_device_times
    from export_gelu.device.script import WARMUP_MS
    from export_gelu.exporter.load import load_model

    progress = progress or Progress(enabled=False)
    opts = VerifyOptions(inputs_file=inputs_file, precision=precision, atol=atol, rtol=rtol,
                         allow_pickle=allow_pickle, model_factory=model_factory,
                         threads=threads, iterations=0, warmup=0, report=report,
                         report_md=report_md, calibrate=False, bundle=bundle)  # nothing timed
    validate(opts, model, deployed=deployed, device_outputs=device_outputs,
             device_times=device_times)  # the checks every verify gets, before any work
    model_path = Path(model)
    out_path = Path(device_outputs)
    if not model_path.is_file():
        raise BadInputError(f"{model_path}: no such file")
    manifest: dict[str, Any] = {}
    if bundle is not None:
        if inputs_file:
            raise BadInputError("--inputs: the bundle holds the inputs the device ran; give "
                                "one or the other")
        manifest, graph, feeds = _from_bundle(Path(bundle), model_path,
                                              Path(deployed) if deployed else None)
        inputs_label = f"the bundle's inputs ({Path(bundle).name}/inputs.npz)"
    else:
        if deployed is None or not inputs_file:
            raise BadInputError("--device-outputs without --bundle needs DEPLOYED (the ONNX "
                                "graph the device ran) and --inputs (the inputs it ran on)")
        graph = Path(deployed)
        feeds = load_inputs_file(inputs_file)
        inputs_label = f"real data from {Path(inputs_file).name} ({len(feeds)} feed(s))"
    dep = open_deployed(graph)
    if dep.kind != "onnx":
        raise BadInputError(f"{graph}: with --device-outputs, DEPLOYED is the ONNX graph the "
                            "device built its engine from")
    device, fmt = read_device_outputs(out_path)
    _check_pairing(device, dep.outputs, out_path, len(feeds))
    times = read_device_times(device_times, manifest.get("trtexec", {}).get(
        "warmup_ms", WARMUP_MS)) if device_times else None

    progress.step(f"loading {model_path}")
    loaded = load_model(model_path, allow_pickle=allow_pickle, model_factory=model_factory)
    dep_feeds = [feed_for(dep, f) for f in feeds]
    chosen = precision or manifest.get("precision") or dep.precision
    why = ("given with --precision" if precision else
           "the bundle's" if manifest else dep.precision_why)
    d_atol, d_rtol = default_tolerances(chosen)
    tol = {} if precision else manifest.get("tolerances", {})  # --precision: its defaults
    atol = atol if atol is not None else tol.get("atol", d_atol)
    rtol = rtol if rtol is not None else tol.get("rtol", d_rtol)

    dtypes = _output_dtypes(graph)
    device = _cast_to_graph(device, dtypes)
    reference = _reference(loaded, dep_feeds[0], dep.outputs, threads, "cpu")
    runner = recorded_runner(device, dict(dep_feeds[0]))
    progress.step(f"running {reference.name} on {len(dep_feeds)} feed(s)")
    try:
        parity = compare_runners(reference, runner, dep_feeds, atol, rtol)
    except (RuntimeError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInputError(f"running MODEL on these inputs failed: {first}") from exc
    _check_shapes(parity, out_path)

    trt_version = manifest.get("tensorrt", "")
    where = f"tensorrt {trt_version} (device)" if trt_version else "tensorrt (device)"
    rep = Report(model=str(model_path), target=where, model_format=loaded.format.value,
                 output=str(graph), precision=chosen, gelu_form="", threads=threads,
                 notes=list(loaded.notes), command="verify", inputs=inputs_label,
                 precision_note=why, options=opts.to_json())
    rep.parity = parity
    rep.trt = {"status": "device", "reason": "", "tensorrt": trt_version or None,
               "target": manifest.get("target"), "outputs_file": str(out_path),
               "outputs_format": fmt, "times_file": str(device_times) if device_times else None}
    if fmt == "trtexec":
        rep.notes.append("trtexec prints values with 6 significant digits: up to 5e-6 relative "
                         "rounding, far below any default rtol")
    if times is not None:
        samples, dropped = times
        rep.latency[DEVICE_RUNNER] = summarize([t / 1e3 for t in samples], dropped,
                                               "trtexec computeMs (GPU compute per inference)")
        if dropped:
            rep.notes.append(f"{dropped} warm-up inference(s) dropped from {device_times} "
                             "(trtexec before 8.6 exports them too)")
    if manifest:
        rep.notes.append(f"bundle for {manifest.get('target')} (TensorRT "
                         f"{manifest.get('tensorrt')}); outputs read from {fmt} JSON")
    rep.notes += _device_version_notes(rep, out_path, trt_version)
    progress.done()
    from export_gelu.report.report import write_reports

    write_reports(rep, report, report_md)
    return rep


def _output_dtypes(graph: Path) -> dict[str, str]:
    import onnx

    from export_gelu.check.deployed import _onnx_dtype_name

    model = onnx.load(str(graph), load_external_data=False)
    return {o.name: _onnx_dtype_name(o.type.tensor_type.elem_type) for o in model.graph.output}


def _device_version_notes(rep: Report, outputs: Path, bundle_version: str) -> list[str]:
    """What trtexec.log beside the outputs says about the TensorRT that produced them."""
    from export_gelu.device.outputs import trtexec_log_version
    from export_gelu.device.trtexec_flags import line_of

    log = outputs.parent / "trtexec.log"
    ran = trtexec_log_version(log) if log.is_file() else None
    if ran is None:
        return []
    rep.trt["device_tensorrt"] = ran
    if bundle_version and line_of(ran) != line_of(bundle_version):
        return [f"{log} says TensorRT {ran} ran it, but the bundle was made for "
                f"{bundle_version}: the verdict holds for {ran}"]
    return [f"{log}: TensorRT {ran} ran it"]
