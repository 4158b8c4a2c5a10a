"""fp16 exports: overflow sites kept in fp32 (passes/compat/precision/fp16_islands.py), the graph
rewritten in place (then checked again by the export's check), the islands listed in the
report.

ONNX Runtime's CPU provider computes many fp16 ops in fp32 (it inserts Casts where it has no
fp16 kernel), so an overflow may not show in parity here while TensorRT or a GPU provider,
computing in fp16, gives inf or NaN there. The sites are therefore found from the values
themselves (the graph run in fp32), whether parity here failed or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from export_gelu.check.runners.deployed import deployed_feed
from export_gelu.check.verdict.parity import ParityResult
from export_gelu.exporter.saving.save import save_onnx_atomic
from export_gelu.passes.compat.precision.fp16_islands import Island, overflow_sites, with_islands
from export_gelu.run import Run

if TYPE_CHECKING:
    from export_gelu.results.export import Engine, SavedGraph

ISLANDS_NOTE = ("fp16 overflow: {sites} exceed fp16's range (|x| > 65504) in the graph run "
                "in fp32; kept in fp32 ({nodes} node(s) with Casts at their edges), the graph "
                "rewritten and verified again (parity before: {before})")


def finds_islands(saved: SavedGraph, run_precision: str, parity: ParityResult, *,
                  engine: Engine | None) -> bool:
    """An fp16 graph of a small model (its weights not streamed), written here and checked in
    ONNX Runtime (no engine built here)."""
    return bool(run_precision == "fp16" and saved.path.is_file() and saved.weights is None
                and engine is None and parity.status != "skipped"
                and parity.nondeterministic is None)


@dataclass(frozen=True)
class Islands:
    """The graph rewritten with fp32 islands (written over the output) and the islands."""

    graph: onnx.ModelProto
    islands: list[Island]

    def note(self, before: ParityResult) -> str:
        """What was kept in fp32, and parity before (`before`)."""
        worst = max((o.max_abs for o in before.outputs.values()), default=float("nan"))
        return ISLANDS_NOTE.format(
            sites=", ".join(f"{i.tensor} ({i.op_type} {i.node}, max |x| {i.max_abs:.3g})"
                            for i in self.islands),
            nodes=len({n for i in self.islands for n in i.nodes}),
            before=f"{before.status}, max abs {worst:.3g}")


def fix_overflow(output: Path, feed: Mapping[str, np.ndarray], run: Run) -> Islands | None:
    """Find the sites of the fp16 graph `output` whose values overflow; when there are any,
    rewrite it with fp32 islands (None: none found, or they could not be fixed: said in a
    note)."""
    model = onnx.load(str(output))
    try:
        sites = overflow_sites(model, deployed_feed(feed, model))
        if not sites:
            return None
        fixed, islands = with_islands(model, sites)
        onnx.checker.check_model(fixed)
    except Exception as exc:  # noqa: BLE001 - the graph as written stands; say why
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        run.note(f"fp16 overflow sites not looked for or not fixed ({first}); the graph is as "
                 "exported", "fp16-islands-skipped")
        return None
    save_onnx_atomic(fixed, output, external_data=False)
    return Islands(fixed, islands)
