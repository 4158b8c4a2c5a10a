"""What a device run hands back, checked before it is judged: the bundle it ran (made from
this model, its graph unchanged), its outputs paired with the graph's, in the graph's dtypes,
and what its trtexec.log says about the TensorRT that ran. The judging itself is the one
checker's (export_gelu/steps/device.py)."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from export_gelu.errors import BadInputError
from export_gelu.shown import shown
from export_gelu.untrusted_files import UntrustedFolder

DEVICE_RUNNER = "tensorrt-device"


def _sha256(path: Path) -> str:
    from export_gelu.device.bundle_layout import sha256_file

    return sha256_file(path)


def bundle_folder(bundle: Path) -> UntrustedFolder:
    """The bundle as a folder whose files are untrusted (untrusted_files.py)."""
    return UntrustedFolder(bundle, "--bundle", "bundle")


def from_bundle(bundle: Path, model_path: Path, deployed: Path | None
                ) -> tuple[dict[str, Any], Path]:
    """(manifest, graph) of a bundle, after checking it belongs to MODEL (its inputs: the
    input resolver's)."""
    from export_gelu.device.bundle_layout import GRAPH, read_manifest

    manifest = read_manifest(bundle)
    if isinstance(manifest.get("forms"), list):
        raise BadInputError(f"--bundle {bundle}: holds one graph per GELU form; give the "
                            f"folder the device wrote: --device-outputs {bundle}/outputs")
    check_model(manifest, bundle, model_path)
    graph = check_graph(bundle, GRAPH, manifest["graph"]["sha256"])
    if deployed is not None and _sha256(deployed) != _sha256(graph):
        raise BadInputError(f"{deployed} is not the bundle's graph ({graph}); drop DEPLOYED "
                            "or give the bundle made from it")
    return manifest, graph


def check_model(manifest: dict[str, Any], bundle: Path, model_path: Path) -> None:
    """The bundle was made from MODEL (its sha256), else exit 2."""
    want = manifest["model"]["sha256"]
    if _sha256(model_path) != want:
        raise BadInputError(f"--bundle {bundle}: made from another model "
                            f"({shown(manifest['model'].get('file', ''))}, sha256 {want[:12]}…),"
                            f" not {model_path.name} (sha256 {_sha256(model_path)[:12]}…)")


def check_graph(bundle: Path, rel: str, sha256: object, field: str = "graph.file") -> Path:
    """The bundle's graph `rel` (a path inside the bundle, no link, a regular file; `field`:
    the manifest's field that names it), unchanged since the bundle was written, with its
    external data beside it inside the bundle; else exit 2. Returns its real path."""
    from export_gelu.exporter.loading.onnx_checks import check_external_data

    folder = bundle_folder(bundle)
    folder.check_name(rel, field, "manifest.json")
    if not folder.is_file(rel) or folder.sha256(rel) != sha256:
        raise BadInputError(f"--bundle {bundle}: {shown(rel)} is missing or is not the graph "
                            "the manifest names (sha256 differs)")
    graph = folder.real_path(rel)
    check_external_data(graph)  # its data: inside the graph's folder, which is the bundle's
    return graph


def checked_file(bundle: Path, rel: object, sha256: object, field: str) -> str:
    """A file the manifest names (`field`), inside the bundle, no link, a regular file,
    unchanged since the bundle was written; else exit 2. Returns its name in the bundle."""
    folder = bundle_folder(bundle)
    name = folder.check_name(rel, field, "manifest.json")
    if not folder.is_file(name) or folder.sha256(name) != sha256:
        raise BadInputError(f"--bundle {bundle}: {shown(name)} is missing or is not the file "
                            f"the manifest names ({field}: sha256 differs)")
    return name


def check_pairing(outputs: list[OrderedDict[str, np.ndarray]], names: list[str],
                   path: Path, feeds: int) -> None:
    if len(outputs) != feeds:
        raise BadInputError(f"--device-outputs {path}: {len(outputs)} iteration(s) for "
                            f"{feeds} input feed(s)")
    got = list(outputs[0])
    missing = [n for n in names if n not in got]
    extra = [n for n in got if n not in names]

    def listed(items: list[str]) -> str:
        return ", ".join(shown(n, 80) for n in items[:20]) + (", …" if len(items) > 20 else "")

    if missing or extra:
        raise BadInputError(
            f"--device-outputs {path}: its outputs ({listed(got)}) are not the graph's "
            f"({listed(names)}): " + "; ".join(filter(None, [
                f"missing {listed(missing)}" if missing else None,
                f"not in the graph: {listed(extra)}" if extra else None])) + " (another model?)")


def check_shapes(parity: Any, path: Path) -> None:
    """Device and reference outputs must have the same shapes (exit 2 naming the output)."""
    (_r, ref_iters), (_d, dev_iters) = parity.run_results[0], parity.run_results[1]
    for ref, dev in zip(ref_iters, dev_iters):
        for name, arr in dev.items():
            if name in ref and tuple(np.shape(ref[name])) != tuple(np.shape(arr)):
                show = "x".join(map(str, np.shape(arr))) or "scalar"
                want = "x".join(map(str, np.shape(ref[name]))) or "scalar"
                raise BadInputError(f"--device-outputs {path}: output {shown(repr(name))} is "
                                    f"{show}, the reference's is {want} (another model or "
                                    "other inputs?)")


def cast_to_graph(outputs: list[OrderedDict[str, np.ndarray]], dtypes: dict[str, str]
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


def output_dtypes(graph: Path) -> dict[str, str]:
    import onnx

    from export_gelu.check.runners.deployed import _onnx_dtype_name

    model = onnx.load(str(graph), load_external_data=False)
    return {o.name: _onnx_dtype_name(o.type.tensor_type.elem_type) for o in model.graph.output}


def device_tensorrt(outputs: Path, folder: UntrustedFolder | None = None) -> str | None:
    """The TensorRT version trtexec.log beside the outputs says ran them (None: no log, or
    it does not say). `outputs` lies inside `folder` (a device folder), or is the file the
    user named; the log is read by the device folder's rule, its head only."""
    from export_gelu.device.outputs import trtexec_log_version

    if folder is None:
        folder, name = UntrustedFolder.of_file(outputs, "--device-outputs")
        outputs = Path(name)
    rel = (outputs.parent / "trtexec.log").as_posix()
    rel = rel[2:] if rel.startswith("./") else rel
    return trtexec_log_version(folder, rel) if folder.is_file(rel) else None


def version_notes(outputs: Path, ran: str, bundle_version: str) -> list[str]:
    """The TensorRT that ran (`ran`, from trtexec.log beside `outputs`), against the version
    the bundle was made for."""
    from export_gelu.device.trtexec_flags import line_of

    log = outputs.parent / "trtexec.log"
    if bundle_version and line_of(ran) != line_of(bundle_version):
        return [f"{log} says TensorRT {ran} ran it, but the bundle was made for "
                f"{bundle_version}: the verdict holds for {ran}"]
    return [f"{log}: TensorRT {ran} ran it"]
