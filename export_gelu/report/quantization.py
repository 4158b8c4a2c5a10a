"""The report's quantization section (`--precision int8|fp8`, and a Q/DQ graph verify reads
back): what quantizing made and found, or the graph's own scales judged."""

from __future__ import annotations

import math

from export_gelu.check.verdict.parity import skipped
from export_gelu.quantize import CALIBRATION_CACHE
from export_gelu.quantize.judge import RULE
from export_gelu.report.report import Report
from export_gelu.report.sections import AutoKeepSection, KeptModule, QuantOutput, QuantSection
from export_gelu.results.quantize import QdqJudged, Quantization
from export_gelu.steps.quant_verdict import JUDGED_BY
from export_gelu.steps.quantize import SIMULATED


def _db(value: float) -> float | None:
    return value if math.isfinite(value) else None


def quant_section(q: Quantization) -> QuantSection:
    """An INT8/FP8 graph's section, from what quantizing it made and found."""
    verdict = q.verdict
    by_module = {s.module: s.sqnr_db for s in q.sensitivity}
    outputs: dict[str, QuantOutput] = {}
    for name, m in q.measured.items():
        judged = verdict.outputs.get(name) if verdict is not None else None
        graph = judged.graph if judged is not None else m
        outputs[name] = QuantOutput(
            _db(graph.sqnr_db), graph.cosine, graph.top1,
            _db(judged.reference.sqnr_db) if judged else None,
            judged.error if judged else None, judged.bound if judged else None,
            judged.passed if judged else None, *(judged.parts() if judged else (None, None)))
    auto = q.auto
    route = q.route
    return QuantSection(
        route.precision, route.kind, route.weights, q.calibrator, q.calibration, q.real_data,
        q.calibration_feeds, q.judged_feeds, q.quantized, q.weight_products, q.gelu_qdq,
        [KeptModule(k, _db(by_module[k]) if k in by_module else None) for k in q.kept],
        [KeptModule(s.module, _db(s.sqnr_db)) for s in q.sensitivity],
        AutoKeepSection(auto.target_db, _db(auto.sqnr_db), auto.met) if auto else None,
        q.judged_by, RULE, q.passed, q.not_judged, outputs,
        list(verdict.notes) if verdict is not None else [],
        str(q.cache_file) if q.cache_file is not None else None)


def judged_qdq(rep: Report, judged: QdqJudged) -> None:
    """A Q/DQ graph judged at its own scales: its section, its precision, and parity skipped
    (an fp32 tolerance says nothing of it) where the verdict was made."""
    rep.quantization = qdq_section(judged)
    rep.precision = judged.graph.precision
    rep.precision_note = ("an fp32 graph and its TensorRT calibration cache, read back"
                          if judged.graph.route == CALIBRATION_CACHE else
                          "a Q/DQ graph: QuantizeLinear/DequantizeLinear read back")
    if judged.verdict is not None:
        rep.parity = skipped(f"{rep.precision} graph: judged by the {rep.precision} verdict "
                             "(quantization)")


def qdq_section(judged: QdqJudged) -> QuantSection:
    """The quantization section of a Q/DQ graph read back and judged at its own scales."""
    g, verdict = judged.graph, judged.verdict
    outputs = {name: QuantOutput(_db(v.graph.sqnr_db), v.graph.cosine, v.graph.top1,
                                 _db(v.reference.sqnr_db), v.error, v.bound, v.passed, *v.parts())
               for name, v in (verdict.outputs.items() if verdict is not None else ())}
    return QuantSection(
        g.precision, g.route, g.weights, "", "the graph's own scales", False, 0,
        judged.judged_feeds, g.quantized, g.weight_products, g.gelu_qdq, [], [], None,
        JUDGED_BY + (SIMULATED if g.route == CALIBRATION_CACHE else ""), RULE, judged.passed,
        judged.not_judged, outputs,
        list(verdict.notes) if verdict is not None else [])
