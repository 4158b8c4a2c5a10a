"""The `localize` stage: when parity fails (or `--localize` asks on a passing run), where the
deployed graph starts to differ from PyTorch (`check/divergence.py`), into the report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from export_gelu.check.deployed import deployed_feed, feed_for
from export_gelu.check.divergence import (
    Localization,
    localize,
    module_tensors,
    with_ties,
    worth_localizing,
)
from export_gelu.check.node_divergence import localize_nodes
from export_gelu.check.parity import diverged
from export_gelu.options import ExportOptions, VerifyOptions
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import AnyState, RunState, VerifyState, need

#: The state of a command that localizes a parity failure (export, verify).
LocalizingState = RunState[ExportOptions | VerifyOptions]
_S = TypeVar("_S", bound=AnyState)


def localizes(state: LocalizingState) -> bool:
    """Parity ran on a graph and its outputs diverged, or `--localize` was given and it ran
    at all; never where nothing diverged (check/divergence.py `worth_localizing`)."""
    return worth_localizing(state.parity, state.options.localize)


def _why_not(state: LocalizingState) -> str:
    """Why this run cannot be localized at all, or ""."""
    if state.deployed is not None and state.deployed.kind != "onnx":
        return "DEPLOYED is a TensorRT engine: its intermediates cannot be marked as outputs"
    return ""


def _has_modules(state: LocalizingState) -> bool:
    """The PyTorch model is still in memory (a big one is freed once its outputs are
    recorded) and is not an ONNX file."""
    loaded = state.loaded
    return bool(loaded is not None and not loaded.is_onnx
                and (loaded.module is not None or loaded.exported is not None))


def _failed(exc: Exception) -> Localization:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return Localization(method="none", reason=f"localizing failed: {first}")


def _as_diagnosis(state: _S, work: Callable[[_S], None]) -> None:
    """Run `work`, a diagnosis: what goes wrong in it is said in report.divergence, and the
    verdict stands (running out of memory is still the world's fault, exit 2)."""
    try:
        work(state)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure here leaves the verdict as it is
        state.report.divergence = _failed(exc)


@stage_io(reads=("deployed", "device", "feeds", "gelu_sites", "graph", "loaded", "options",
                "output", "parity", "run_precision", "tolerances"),
          writes=())
def localize_stage(state: LocalizingState) -> None:
    """loaded, the graph (DEPLOYED or the written output), the main feed, the tolerances →
    report.divergence."""
    _as_diagnosis(state, _localize)


def _localize(state: LocalizingState) -> None:
    rep = state.report
    why = _why_not(state)
    if why:
        rep.divergence = Localization(method="none", reason=why)
        return
    state.progress.step("comparing module outputs with PyTorch (first divergence)")
    if state.deployed is not None:  # verify
        path, feed = state.deployed.path, feed_for(state.deployed, state.feed)
    else:  # export: the graph just written
        path, feed = need(state.output, "output"), deployed_feed(state.feed, state.graph)
    tol = state.tolerances
    if tol is None:
        from export_gelu.pipeline.checking import export_tolerances

        tol = export_tolerances(state)
    device = state.device.device if state.device else "cpu"
    threads = state.options.threads
    found = (localize(state.loaded, path, feed, tol, threads=threads, device=device)
             if _has_modules(state) else None)
    if found is None or found.method == "none":  # no module maps: node by node
        found = localize_nodes(path, feed, tol, threads)
    rep.divergence = with_ties(found, path, feed, threads) if diverged(state.parity) else found


def bundle_tensors(state: LocalizingState, graph_path: Path) -> list[str]:
    """The module-boundary tensors a device bundle asks the device for ([] without modules:
    an ONNX MODEL, a graph without provenance, a big model already freed)."""
    return module_tensors(state.loaded, Path(graph_path)) if _has_modules(state) else []


@stage_io(reads=("deployed", "device", "device_module_outputs", "device_outputs", "feeds",
                "loaded", "options", "parity", "tolerances"),
          writes=())
def localize_device(state: VerifyState) -> None:
    """`verify --bundle DIR --device-outputs F`: the module-boundary tensors the device handed
    back (F from `run_on_device.sh localize`) against PyTorch's modules, on the first feed."""
    _as_diagnosis(state, _localize_device)


def _localize_device(state: VerifyState) -> None:
    recorded = state.device_module_outputs
    if not recorded:
        state.report.divergence = Localization(
            method="none", reason="the device's outputs hold no module-boundary tensor: run "
                                  "`sh run_on_device.sh localize` and pass module_outputs.json")
        return
    if not _has_modules(state):
        state.report.divergence = Localization(method="none", reason="MODEL has no PyTorch "
                                                                     "modules to compare with")
        return
    state.progress.step("comparing the device's module outputs with PyTorch (first divergence)")
    dep = need(state.deployed, "deployed")
    feed = feed_for(dep, state.feed)
    device = state.device.device if state.device else "cpu"
    recorded = {**state.device_outputs[0], **recorded}  # the graph's outputs end modules too
    found = localize(state.loaded, dep.path, feed, need(state.tolerances, "tolerances"),
                     threads=state.options.threads, device=device, recorded=recorded)
    state.report.divergence = (with_ties(found, dep.path, feed, state.options.threads)
                               if diverged(state.parity) else found)
