"""Before an export's work: where it writes (its paths were checked by output_plan), which
device checks it, and whether the engine it was asked for can be built here. Nothing is
written and nothing loaded."""

from __future__ import annotations

from pathlib import Path

from export_gelu.check.runners.devices import resolve_device
from export_gelu.check.runners.trt_runner import local_engine_blocker, trt_unavailable_reason
from export_gelu.errors import TargetUnmetError
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.exporter.saving.weight_size import check_disk_for
from export_gelu.options import ExportOptions, quantizing
from export_gelu.output_plan import export_output
from export_gelu.results.export import ExportPlan
from export_gelu.results.request import Request
from export_gelu.run import Run
from export_gelu.targets import TargetProfile


def plan_export(request: Request[ExportOptions], run: Run) -> ExportPlan:
    """The plan; refuses (exit 3) an engine `--require-trt` asks for that cannot be built
    here; an output that exists is replaced, said in a note."""
    o, profile = request.options, request.profile
    planned = request.checked.outputs
    if planned is not None and planned.folder is not None:  # several graphs: into a folder
        output = planned.folder
    else:
        output = export_output(o, request.model)
    if quantizing(o):  # fp8 on 8.x, a route the target lacks: exit 3 before any work
        from export_gelu.quantize import route_for
        from export_gelu.quantize.routes import refuse_dynamic_cache

        refuse_dynamic_cache(route_for(profile, str(o.precision)),
                             " ".join(f"--dynamic {d}" for d in o.dynamic))
    replaced = output.is_file()
    device = resolve_device(o.device) if o.verify or o.device else None
    wants = profile.runtime == "trt" or bool(o.engine) or o.require_trt
    why_not = trt_unavailable_reason()
    if wants and o.require_trt and why_not:
        raise TargetUnmetError(f"--require-trt: TensorRT engine build impossible here: "
                               f"{why_not}")
    if replaced:  # said in one line, not silently
        run.note(f"{output} existed and was replaced by this export", "output-replaced")
    return ExportPlan(profile, output, device, wants, why_not)


def check_disk(loaded: LoadedModel, output: Path) -> None:
    """The output's disk must hold the export (exit 2 before any export work)."""
    check_disk_for(loaded, output if output.parent.is_dir() else output.parent)  # -o DIR/


def local_engine_blocker_of(profile: TargetProfile) -> str | None:
    """Why no engine of the target's own TensorRT version can be built here (None: it can,
    or the target is not TensorRT)."""
    if profile.runtime != "trt":
        return None
    return local_engine_blocker(profile.trt_version)
