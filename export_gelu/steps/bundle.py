"""A device bundle (`--bundle DIR`, device/bundle.py): the graph, its inputs, the reference's
outputs on them and `run_on_device.sh`, for a TensorRT the run cannot drive here; with the
precision TensorRT computes the graph in and that precision's tolerances, which
`verify --device-outputs` judges the device's outputs with."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.check.reference.runner import reference_runner
from export_gelu.check.runners.deployed import deployed_feed
from export_gelu.check.verdict.parity import ParityResult, skipped
from export_gelu.device.binding import FLOAT64_ON_TRT, device_precision
from export_gelu.device.bundle import (
    CALIBRATION_CACHE,
    BundleRequest,
    bundle_note,
    reference_outputs,
    write_bundle,
)
from export_gelu.exporter.feeds.dynamic_axes import DynamicAxis
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.options import RunOptions
from export_gelu.results.export import ExportInputs, SavedGraph, Verdict
from export_gelu.results.quantize import Quantization
from export_gelu.run import Run
from export_gelu.steps.check import export_tolerances
from export_gelu.steps.localize import bundle_tensors
from export_gelu.targets import TargetProfile
from export_gelu.tolerances import Tolerances

if TYPE_CHECKING:
    from polygraphy.backend.base import BaseRunner


@dataclass(frozen=True)
class BundleJob:
    """What goes into one bundle: the graph and its feed (as it takes it), how to get the
    reference's outputs, the precision and tolerances the device is judged with."""

    model: Path  # MODEL, which `verify --device-outputs` checks the device against
    graph: Path
    loaded: LoadedModel
    profile: TargetProfile
    feed: Mapping[str, np.ndarray]
    parity: ParityResult | None  # the check here (its outputs are reused when it ran on `feed`)
    reference: Callable[[], BaseRunner]  # makes the reference runner when it runs again
    precision: str
    tolerances: Tolerances
    dynamic: Sequence[DynamicAxis] = ()
    fp32_layers: Sequence[str] = ()
    quantized_flags: Sequence[str] | None = None  # an INT8/FP8 graph's trtexec flags
    calibration_cache: str | None = None  # TensorRT 7.x's, for --calib


def write_device_bundle(job: BundleJob, folder: str, run: Run) -> Path:
    """The bundle, written to `folder`; a note says what to run on the device and how to
    bring its outputs back."""
    run.say(f"writing the device bundle {folder}")
    name, outputs = reference_outputs(job.parity, job.reference, job.feed)
    profile = job.profile
    req = BundleRequest(model_path=job.model, graph_path=job.graph, target=profile.name,
                        trt_version=profile.trt_version, precision=job.precision,
                        feed=job.feed, reference=outputs, reference_name=name,
                        atol=job.tolerances.atol, rtol=job.tolerances.rtol,
                        dynamic=job.dynamic, fp32_layers=job.fp32_layers,
                        module_tensors=bundle_tensors(job.loaded, job.graph),
                        quantized_flags=job.quantized_flags,
                        calibration_cache=job.calibration_cache)
    out = write_bundle(req, folder)
    run.add_notes([bundle_note(out, job.model, profile.name, profile.trt_version)])
    return out



def export_bundle_job(model: Path, saved: SavedGraph, inputs: ExportInputs,
                      verdict: Verdict | None, options: RunOptions, run: Run, *,
                      quantization: Quantization | None = None) -> BundleJob:
    """The bundle of an export's written graph (`verdict` None: --no-verify); a float64 graph
    is bundled in fp32 (the parser reads DOUBLE as FLOAT), said in a note; an INT8/FP8
    graph with the trtexec flags its TensorRT takes, and 7.x's calibration cache."""
    if quantization is not None:
        return _quantized_job(model, saved, inputs, options, run, quantization)
    graph = verdict.graph if verdict is not None else saved.graph
    parity = verdict.parity if verdict is not None else skipped("--no-verify")
    reference = verdict.reference if verdict is not None else None
    if reference is None:
        reference = reference_runner(inputs.loaded, inputs.held.reference, inputs.feed, graph,
                                     options.threads)
    precision = device_precision(inputs.run_precision)
    if precision != inputs.run_precision:
        run.note(FLOAT64_ON_TRT, "float64-on-tensorrt")
    islands = parity.islands or []
    return BundleJob(model, saved.path, inputs.loaded, saved.profile,
                     deployed_feed(inputs.feed, graph), parity, lambda: reference, precision,
                     export_tolerances(saved.gelu_sites, precision, options),
                     dynamic=inputs.dynamic.axes(),
                     fp32_layers=[n for i in islands for n in i.nodes])


def _quantized_job(model: Path, saved: SavedGraph, inputs: ExportInputs, options: RunOptions,
                   run: Run, quantization: Quantization) -> BundleJob:
    """An INT8/FP8 graph's bundle: PyTorch's fp32 outputs as the reference (the device's are
    judged by the INT8/FP8 verdict), the precision flags of the version (quantize/flags.py),
    the kept modules' layers pinned to fp32 where trtexec can."""
    from export_gelu.quantize import trtexec_precision_flags

    route = quantization.route
    build = trtexec_precision_flags(route, quantization.kept_layers,
                                    cache_file=CALIBRATION_CACHE)
    run.add_notes(build.notes)
    reference = reference_runner(inputs.loaded, inputs.held.reference, inputs.feed,
                                 saved.graph, options.threads)
    return BundleJob(model, saved.path, inputs.loaded, saved.profile,
                     deployed_feed(inputs.feed, saved.graph), None, lambda: reference,
                     route.precision, export_tolerances(saved.gelu_sites, "fp32", options),
                     dynamic=inputs.dynamic.axes(), quantized_flags=build.flags,
                     calibration_cache=quantization.calibration_cache)
