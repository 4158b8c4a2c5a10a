"""An ONNX input checked before anything runs it: a readable, valid file at an opset this onnx
knows, its external data inside its folder, its weights finite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from export_gelu.errors import BadInputError
from export_gelu.exporter.loading.loaded import first_line
from export_gelu.exporter.model_files.model_reads import contained, model_root
from export_gelu.fspaths import utf8_path

if TYPE_CHECKING:
    import onnx


def _external_refs(model: onnx.ModelProto) -> Iterator[tuple[str, dict[str, str]]]:
    """(tensor name, external_data entries) of every tensor stored outside the file,
    subgraphs' included."""
    from export_gelu.onnx_weights import all_tensors, is_external

    for tensor in all_tensors(model):
        if is_external(tensor):
            yield tensor.name, {e.key: e.value for e in tensor.external_data}


def refuse_unknown_opset(path: Path, model: onnx.ModelProto) -> None:
    """Exit 2 when the model declares an ONNX opset newer than any this onnx knows: its ops'
    meaning cannot be known, so no conversion of it can be trusted."""
    import onnx

    known = onnx.defs.onnx_opset_version()
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and entry.version > known:
            raise BadInputError(f"{path}: declares ONNX opset {entry.version}, which export-gelu "
                                f"does not know (it knows opsets 1 to {known}, those of onnx "
                                f"{onnx.__version__}); export the model at opset {known} or "
                                "lower")


def check_external_data(path: Path) -> list[Path]:
    """Refuse external-data references that escape the model's folder, point at missing files
    or reach past a file's end; return the files referenced."""
    from export_gelu.onnx_file import read_structure

    try:
        model = read_structure(path)
    except Exception as exc:  # noqa: BLE001
        raise BadInputError(f"{path}: not a readable ONNX file ({first_line(exc)})") from exc
    refuse_unknown_opset(path, model)
    base = path.resolve().parent  # where onnx_weights.load_graph reads the data from
    root = model_root(base)
    sizes: dict[Path, int] = {}
    for name, info in _external_refs(model):
        location = info.get("location", "")
        if "\x00" in location or not location:
            raise BadInputError(f"{path}: tensor {name!r} has no usable external-data "
                                f"location ({location!r})")
        target = contained(root, base, location, path,
                           f"tensor {name!r} keeps its data at")
        if target not in sizes:
            if not target.is_file():
                raise BadInputError(f"{path}: tensor {name!r} keeps its data in {location!r}, "
                                    "which is missing (copy the .data file with the .onnx)")
            sizes[target] = target.stat().st_size
        try:
            offset = int(info.get("offset", 0))
            length = int(info["length"]) if "length" in info else sizes[target] - offset
        except ValueError as exc:
            raise BadInputError(f"{path}: tensor {name!r} has a malformed external-data "
                                "offset or length") from exc
        if offset < 0 or length < 0 or offset + length > sizes[target]:
            raise BadInputError(f"{path}: tensor {name!r} needs bytes {offset}..{offset + length}"
                                f" of {location!r}, which holds {sizes[target]}: truncated")
    return sorted(sizes)


def check_onnx_valid(path: Path) -> None:
    """Refuse an ONNX file that onnx.checker rejects: no output made from it could pass.
    A path C++ cannot take (not UTF-8) is checked as the model read in Python (its external
    data was checked by `check_external_data`)."""
    import onnx

    try:
        fs_path = utf8_path(path)
        if fs_path is None:
            with path.open("rb") as fh:
                onnx.checker.check_model(onnx.load_model(fh, load_external_data=False))
            return
        onnx.checker.check_model(fs_path)
    except Exception as exc:  # noqa: BLE001 - ValidationError and C++ errors
        raise BadInputError(f"{path}: not a valid ONNX model (onnx.checker: "
                            f"{first_line(exc)})") from exc


def load_onnx_model(path: str | Path) -> onnx.ModelProto:
    """An ONNX file after checking every data reference is sound: small tensors read in, large
    external ones left in their file and read on demand (onnx_weights.load_graph), so the
    weights are never held while the graph is rewritten."""
    from export_gelu.onnx_weights import load_graph

    path = Path(path)
    check_external_data(path)
    try:
        model = load_graph(path)
    except Exception as exc:  # noqa: BLE001 - onnx raises ValidationError, OSError, DecodeError
        raise BadInputError(f"{path}: cannot load the ONNX model with its external data "
                            f"({type(exc).__name__}: {first_line(exc)})") from exc
    bad = nan_initializers(model)
    if bad:
        raise BadInputError(f"{path}: initializer {bad[0]!r} holds NaN (a corrupt model); "
                            "its outputs could not be verified")
    return model


def nan_initializers(model: onnx.ModelProto, limit: int = 3) -> list[str]:
    """Names of floating initializers holding NaN (those left in their file are checked as
    they are streamed into the output)."""
    import numpy as np
    from onnx import numpy_helper

    from export_gelu.onnx_weights import is_lazy

    bad = []
    for init in model.graph.initializer:
        if is_lazy(init):
            continue
        arr = numpy_helper.to_array(init)
        if arr.dtype.kind == "f" and bool(np.isnan(arr).any()):
            bad.append(init.name)
            if len(bad) >= limit:
                break
    return bad
