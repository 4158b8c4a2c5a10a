"""Where a deployed graph starts to differ from PyTorch (`check/localize/divergence.py`): when
parity fails, or `--localize` asks on a passing run. A diagnosis: what goes wrong in it is said in
its result, and the verdict stands."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import onnx

from export_gelu.check.localize.divergence import (
    Localization,
    localize,
    module_tensors,
    with_ties,
    worth_localizing,
)
from export_gelu.check.localize.node_divergence import localize_nodes
from export_gelu.check.verdict.parity import ParityResult, diverged
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.results.quantize import QdqJudged
from export_gelu.run import Run
from export_gelu.steps.quant_verdict import quantized_reference
from export_gelu.tolerances import Tolerances


def localizes(parity: ParityResult, asked: bool) -> bool:
    """Parity ran on a graph and its outputs diverged, or `--localize` was given and it ran
    at all; never where nothing diverged (check/localize/divergence.py `worth_localizing`)."""
    return worth_localizing(parity, asked)


def judged(quantized: QdqJudged | None) -> bool:
    """A Q/DQ graph judged at its scales: its modules are compared with PyTorch at them."""
    return quantized is not None and quantized.verdict is not None


def quant_localizes(quantized: QdqJudged | None, parity: ParityResult, asked: bool) -> bool:
    """`localizes`, where a Q/DQ graph judged at its scales is looked into when its INT8/FP8
    verdict failed (or `--localize` asked), not when fp32 tolerances do."""
    if not judged(quantized):
        return localizes(parity, asked)
    assert quantized is not None
    return quantized.passed is False or asked


def _has_modules(loaded: LoadedModel | None) -> bool:
    """The PyTorch model is still in memory (a big one is freed once its outputs are
    recorded) and is not an ONNX file."""
    return bool(loaded is not None and not loaded.is_onnx
                and (loaded.module is not None or loaded.exported is not None))


def _as_diagnosis(work: Callable[[], Localization]) -> Localization:
    """`work()`, a diagnosis: what goes wrong in it is said in the result (running out of
    memory is still the world's fault, exit 2)."""
    try:
        return work()
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure here leaves the verdict as it is
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return Localization(method="none", reason=f"localizing failed: {first}")


def _against(loaded: LoadedModel, graph: Path, feed: Mapping[str, np.ndarray],
             tolerances: Tolerances, *, quantized: bool, threads: int, device: str,
             recorded: Mapping[str, np.ndarray] | None = None) -> Localization:
    """`localize` against the model's modules, or for a Q/DQ graph (`quantized`) against
    them computing at the graph's scales (steps/quant_verdict.py), so that only what the
    quantization itself does not explain diverges."""
    if not quantized:
        return localize(loaded, graph, feed, tolerances, threads=threads, device=device,
                        recorded=recorded)
    with quantized_reference(loaded, onnx.load(str(graph))) as module:
        return localize(loaded, graph, feed, tolerances, threads=threads, device=device,
                        recorded=recorded, module=module)


def localize_graph(loaded: LoadedModel, graph: Path, feed: Mapping[str, np.ndarray],
                   tolerances: Tolerances, *, parity: ParityResult, threads: int, device: str,
                   run: Run, quantized: bool = False) -> Localization:
    """The first divergence of the ONNX graph `graph` (run on `feed`, as it takes it) from
    `loaded`'s modules (at the graph's scales where it is `quantized`), else node by node
    against the graph run in a wider precision; where the outputs diverged (`parity`), the
    ops fed ties that decide their result too."""
    def work() -> Localization:
        run.say("comparing module outputs with PyTorch (first divergence)"
                + (" at the graph's scales" if quantized else ""))
        found = (_against(loaded, graph, feed, tolerances, quantized=quantized, threads=threads,
                           device=device)
                 if _has_modules(loaded) else None)
        if found is None or found.method == "none":  # no module maps: node by node
            found = localize_nodes(graph, feed, tolerances, threads)
        # a Q/DQ graph's fp32 parity always differs: its verdict, not ties, said it diverged
        return (with_ties(found, graph, feed, threads) if diverged(parity) and not quantized
                else found)

    return _as_diagnosis(work)


def engine_not_localized() -> Localization:
    """A TensorRT engine as DEPLOYED: nothing to localize in."""
    return Localization(method="none", reason="DEPLOYED is a TensorRT engine: its "
                                              "intermediates cannot be marked as outputs")


def localize_device(loaded: LoadedModel, graph: Path, feed: Mapping[str, np.ndarray],
                    tolerances: Tolerances, recorded: Mapping[str, np.ndarray], *,
                    device_outputs: Mapping[str, np.ndarray], parity: ParityResult,
                    threads: int, device: str, run: Run, quantized: bool = False
                    ) -> Localization:
    """`verify --bundle DIR --device-outputs F`: the module-boundary tensors the device handed
    back (`recorded`, from `run_on_device.sh localize`; the first feed's) against PyTorch's
    modules; the graph's outputs (`device_outputs`) end modules too."""
    def work() -> Localization:
        if not recorded:
            return Localization(method="none", reason="the device's outputs hold no "
                                "module-boundary tensor: run `sh run_on_device.sh localize` "
                                "and pass module_outputs.json")
        if not _has_modules(loaded):
            return Localization(method="none", reason="MODEL has no PyTorch modules to "
                                                      "compare with")
        run.say("comparing the device's module outputs with PyTorch (first divergence)")
        found = _against(loaded, graph, feed, tolerances, quantized=quantized,
                         threads=threads, device=device,
                         recorded={**device_outputs, **recorded})
        return with_ties(found, graph, feed, threads) if diverged(parity) else found

    return _as_diagnosis(work)


def bundle_tensors(loaded: LoadedModel, graph: Path) -> list[str]:
    """The module-boundary tensors a device bundle asks the device for ([] without modules:
    an ONNX MODEL, a graph without provenance, a big model already freed)."""
    return module_tensors(loaded, Path(graph)) if _has_modules(loaded) else []
