"""What quantizing an export's graph made (`--precision int8|fp8`, steps/quantize.py): the
route taken for the target, the calibration, what was quantized and kept, and the verdict."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from export_gelu.quantize import ModuleSensitivity, OutputQuality, QuantRoute, QuantVerdict


@dataclass(frozen=True)
class AutoKeep:
    """`--keep-precision auto`: the target, the SQNR reached and the modules kept for it."""

    target_db: float
    sqnr_db: float
    kept: tuple[str, ...]
    steps: tuple[tuple[tuple[str, ...], float], ...]  # (kept so far, SQNR measured)

    @property
    def met(self) -> bool:
        return self.sqnr_db >= self.target_db


@dataclass(frozen=True)
class Quantization:
    """One graph quantized: how, from which data, what, and how good it is."""

    route: QuantRoute
    calibrator: str
    calibration: str  # where the calibration feeds came from, in words
    real_data: bool  # the user's --calibration-data, not generated inputs
    calibration_feeds: int
    judged_feeds: int
    quantized: int  # weight products quantized
    weight_products: int  # weight products in the graph
    gelu_qdq: int  # Q/DQ tensors inside a GELU site (0: every GELU whole)
    kept: tuple[str, ...]  # modules kept in float (asked, or chosen by auto)
    kept_layers: tuple[str, ...]  # the ONNX nodes of the kept modules' products
    sensitivity: tuple[ModuleSensitivity, ...]  # most sensitive first; () : not measured
    auto: AutoKeep | None
    verdict: QuantVerdict | None  # None: not judged (why: `not_judged`)
    judged_by: str  # what the graph was judged against, in words
    not_judged: str
    calibration_cache: str | None  # TensorRT's calibration cache (7.x), its text
    measured: dict[str, OutputQuality]  # the graph judged against the fp32 graph (ORT)
    cache_file: Path | None = None  # the calibration cache written beside the graph (no bundle)

    @property
    def passed(self) -> bool | None:
        return None if self.verdict is None else self.verdict.passed


@dataclass(frozen=True)
class QdqGraph:
    """A Q/DQ graph as read back (verify's DEPLOYED, a bundle's graph): its precision, how
    its weights are stored, the weight products it quantizes of all, Q/DQ inside a GELU."""

    precision: str  # int8 | fp8
    weights: str  # float_q_dq | quantized_dq
    quantized: int
    weight_products: int
    gelu_qdq: int
    route: str = "qdq"  # qdq | calibration_cache (a 7.x bundle: its cache simulated as Q/DQ)


@dataclass(frozen=True)
class QdqJudged:
    """A Q/DQ graph judged at its own scales (verify, verify --device-outputs)."""

    graph: QdqGraph
    judged_feeds: int
    verdict: QuantVerdict | None  # None: not judged (why: `not_judged`)
    not_judged: str = ""

    @property
    def passed(self) -> bool | None:
        return None if self.verdict is None else self.verdict.passed
