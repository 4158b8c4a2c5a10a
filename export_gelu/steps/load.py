"""The model a command reads, loaded as every command loads it: by content (exporter/
model_files/detect.py), without running a file's pickles; a model handed over in memory as it
is. The loader's notes go to the run."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

from export_gelu.errors import BadInputError
from export_gelu.exporter.hf.folder import folder_task, is_hf_folder
from export_gelu.exporter.loading.load import load_model
from export_gelu.exporter.model_files.detect import refuse_missing
from export_gelu.notes import tagged
from export_gelu.options import ExportOptions, FormsOptions, RunOptions
from export_gelu.results.request import GraphsSource, OneGraphSource, Request, Source, source_of
from export_gelu.run import Run


def load(request: Request[RunOptions], run: Run) -> Source:
    """The model `request` names (or the one it hands over in memory)."""
    o = request.options
    loaded = request.in_memory
    if loaded is None:
        refuse_missing(request.model)  # said before any "loading" progress line
        run.say(f"loading {request.model}")
        loaded = load_model(
            request.model, allow_pickle=o.allow_pickle, model_factory=o.model_factory,
            imports=o.imports, task=o.task, inputs=list(o.inputs),
            inputs_npz=o.inputs_npz if isinstance(o, (ExportOptions, FormsOptions)) else None,
            static=o.static if isinstance(o, ExportOptions) else False,
            sizes_opset=_export_opset(request), sizes_precision=o.precision or "fp32",
            needs_inputs=isinstance(o, (ExportOptions, FormsOptions)) and not (
                o.inputs or o.inputs_npz or request.checked.dynamic))
    run.add_notes(tagged("loader", loaded.notes))
    return source_of(loaded)


def several_graphs(request: Request[RunOptions]) -> tuple[str, int] | None:
    """(task, how many graphs) when the model `request` names is a Hugging Face folder whose
    task exports several graphs; None otherwise. Read from config.json alone, before any
    loading: a command that cannot take them says so at once (a BART-like folder's three
    graphs take seconds each to capture)."""
    model = Path(request.model)
    if request.in_memory is not None or not is_hf_folder(model):
        return None
    o = request.options
    resolved = folder_task(model, o.task, o.allow_pickle)
    files = resolved.graph_files if resolved is not None else []
    return (resolved.name, len(files)) if resolved is not None and len(files) > 1 else None


def load_one_graph(request: Request[RunOptions], run: Run) -> OneGraphSource:
    """`load`, for a command that takes one graph (verify, --compare-forms): a folder whose
    task exports several is exit 2, said before the model is loaded."""
    if request.in_memory is None:
        refuse_missing(request.model)
        many = several_graphs(request)
        if many is not None:
            _refuse_many(request, *many)
    source = load(request, run)
    if isinstance(source, GraphsSource):
        _refuse_many(request, source.loaded.task, len(source.graphs))
    return source


def _refuse_many(request: Request[RunOptions], task: str, graphs: int) -> NoReturn:
    raise BadInputError(f"{request.model}: task {task} exports {graphs} graphs; verify and "
                        "--compare-forms take a one-graph task (pass --task, e.g. "
                        "feature-extraction)")


def _export_opset(request: Request[RunOptions]) -> int:
    """The opset the export will be at (`--opset`, else the target's); 0 when unknown (not an
    export: its options have no opset, and its checked profile none)."""
    o, profile = request.options, request.checked.profile
    opset = o.opset if isinstance(o, ExportOptions) else None
    return int(opset or (profile.opset if profile is not None else 0) or 0)
