"""GELU forms side by side, measured: each exported graph's end-to-end error against PyTorch
and its latency (one interleaved run), the table, and a form picked by measurement.

The graphs come from the export steps, once per form (export_gelu/steps/forms.py drives
it); this module holds the table, its rows and the choice among them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from export_gelu.check.latency import Latency
from export_gelu.check.verdict.parity import OutputError
from export_gelu.errors import BadInputError
from export_gelu.json_value import JsonObject

if TYPE_CHECKING:
    import onnx

_GELU_OPS = ("Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Erf", "Tanh", "Pow", "Sigmoid")
_FUSED_OPS = ("Gelu", "FastGelu", "BiasGelu", "QuickGelu")


@dataclass
class FormRow:
    """One exported graph: the form(s) that produced it, its error and its latency."""

    form: str
    target: str
    same_as: list[str] = field(default_factory=list)  # forms that gave the identical graph
    graph: str = ""  # the GELU-related ops in the graph, e.g. "Gelu×2" or "Tanh×2 Pow×2"
    layout: str = ""  # fused | expanded
    opset: int | None = None
    exporter: str | None = None
    max_abs: float | None = None
    mean_abs: float | None = None
    outputs: dict[str, OutputError] = field(default_factory=dict)
    latency: Latency | None = None
    ratio: float | None = None
    path: str | None = None
    error: str = ""  # why this form has no numbers (it could not be exported)
    quantized: JsonObject | None = None  # int8/fp8: its verdict, SQNR (steps/quantize)

    @property
    def label(self) -> str:
        return " = ".join([self.form, *self.same_as])

    @property
    def key(self) -> str:
        return f"{self.label} @ {self.target}"

    def to_json(self) -> JsonObject:
        from dataclasses import asdict

        return {
            "form": self.form, "same_as": self.same_as, "target": self.target,
            "graph": self.graph, "layout": self.layout, "opset": self.opset,
            "exporter": self.exporter, "max_abs": self.max_abs, "mean_abs": self.mean_abs,
            "outputs": {n: asdict(o) for n, o in self.outputs.items()},
            "latency": self.latency.to_json() if self.latency else None,
            "ratio_to_fastest": self.ratio, "error": self.error,
            "quantized": self.quantized,
        }


@dataclass
class FormsComparison:
    """The table: every form on every target, measured in one interleaved run."""

    model: str
    runtime: str
    threads: int
    iterations: int
    rows: list[FormRow] = field(default_factory=list)
    reference: Latency | None = None
    notes: list[str] = field(default_factory=list)
    choice: str = ""  # filled by `choose_form`: what was picked and why

    @property
    def measured(self) -> list[FormRow]:
        return [r for r in self.rows if r.latency is not None]

    def fastest(self) -> FormRow | None:
        rows = self.measured
        return min(rows, key=lambda r: _latency(r).median_ms) if rows else None

    def row(self, form: str, target: str | None = None) -> FormRow:
        """The row that `form` produced (also when it merged into another form's graph)."""
        for r in self.rows:
            if (form == r.form or form in r.same_as) and target in (None, r.target):
                return r
        raise KeyError(f"{form} @ {target}")

    def to_json(self) -> JsonObject:
        return {
            "model": self.model, "runtime": self.runtime, "threads": self.threads,
            "iterations": self.iterations, "rows": [r.to_json() for r in self.rows],
            "reference_latency": self.reference.to_json() if self.reference else None,
            "notes": self.notes, "choice": self.choice,
        }

    def table(self) -> str:
        """The one table users read: form, error vs PyTorch, latency, ratio to the fastest."""
        fastest = self.fastest()
        head = (f"GELU forms of {self.model}: {self.runtime}, {self.threads} thread(s), "
                f"{self.iterations} interleaved runs each; error = max |deployed − PyTorch| over "
                "all outputs")
        cols = (f"  {'form':<16} {'target':<7} {'graph':<14} {'max abs err':>11} "
                f"{'mean abs err':>12} {'median ms':>10} {'± %':>5} {'p90 ms':>8} {'× fastest':>9}")
        lines = [head, cols]
        for r in self.rows:
            if r.latency is None:
                lines.append(f"  {r.label:<16} {r.target:<7} not measured: {r.error}")
                continue
            tie = "~" if fastest is not None and r is not fastest and r.latency.overlaps(
                _latency(fastest)) else " "
            lines.append(
                f"  {r.label:<16} {r.target:<7} {r.graph:<14} {r.max_abs:>11.3g} "
                f"{r.mean_abs:>12.3g} {r.latency.median_ms:>10.3f} {r.latency.spread_pct:>5.1f} "
                f"{r.latency.p90_ms:>8.3f} {r.ratio:>8.2f}{tie}")
        if self.reference is not None:
            lines.append(f"  {'pytorch (eager)':<16} {'':<7} {'reference':<14} {0:>11} {0:>12} "
                         f"{self.reference.median_ms:>10.3f} {self.reference.spread_pct:>5.1f} "
                         f"{self.reference.p90_ms:>8.3f}")
        lines.append("  (± %: the median's 95% interval, at least the noise floor between "
                     "sessions; ~: not told apart from the fastest)")
        lines += [f"Note: {n}" for n in self.notes]
        if self.choice:
            lines.append(self.choice)
        return "\n".join(lines)


def graph_ops(model: onnx.ModelProto) -> tuple[str, str]:
    from export_gelu.parse_check import op_counts

    counts = {k.split(".")[-1]: 0 for k in _GELU_OPS}
    for op, n in op_counts(model).items():
        short = op.split(".")[-1]
        if short in counts:
            counts[short] += n
    text = " ".join(f"{op}×{n}" for op, n in counts.items() if n) or "none"
    fused = any(counts[op] for op in _FUSED_OPS)
    return text, "fused" if fused else "expanded"


def fingerprint(model: onnx.ModelProto) -> str:
    """Equal for graphs that are the same (two forms that exported identically share a row)."""
    return hashlib.sha256(model.graph.SerializeToString()).hexdigest()


def _latency(row: FormRow) -> Latency:
    """A measured row's latency (the rows compared are the measured ones)."""
    assert row.latency is not None
    return row.latency


def _error(row: FormRow) -> float:
    """A measured row's max abs error (`choose_form` keeps only rows that have one)."""
    assert row.max_abs is not None
    return row.max_abs


def _within(row: FormRow, atol: float) -> bool:
    """A float form: its error within `atol`; a quantized one (int8/fp8): its verdict against
    PyTorch at its own scales passed (an fp32 atol says nothing of it; not judged: kept)."""
    if row.quantized is not None:
        return row.quantized.get("passed") is not False
    return _error(row) <= atol


def choose_form(comparison: FormsComparison, atol: float, target: str | None = None
                ) -> tuple[FormRow, str]:
    """The fastest form whose measured error is within `atol` (int8/fp8 forms: whose verdict
    passed), and why, in words.

    Forms whose median latency cannot be told apart from the fastest (overlapping 95%
    intervals) count as equally fast; among those the most accurate is chosen.
    """
    rows = [r for r in comparison.measured if target in (None, r.target)
            and r.max_abs is not None]
    if not rows:
        raise BadInputError("no measured GELU form to choose from")
    within = [r for r in rows if _within(r, atol)]
    quantized = next((r.quantized for r in rows if r.quantized is not None), None)
    bound = (f"its {str(quantized['precision']).upper()} verdict" if quantized is not None
             else f"atol {atol:g}")
    if not within:
        best = min(rows, key=_error)
        return best, (f"gelu auto: no form stays within {bound}; the most accurate is "
                      f"{best.label} (max abs error {best.max_abs:.3g}), used anyway: parity "
                      "will say whether it passes")
    fastest = min(within, key=lambda r: _latency(r).median_ms)
    ties = [r for r in within if _latency(r).overlaps(_latency(fastest))]
    chosen = min(ties, key=_error)
    lat = _latency(chosen)
    why = (f"gelu auto: chose {chosen.label} on {chosen.target} ({chosen.graph}): "
           f"{lat.median_ms:.3f} ms median, max abs error {_error(chosen):.3g} "
           f"within {bound}")
    if chosen is not fastest:
        why += (f"; {fastest.label} measured {_latency(fastest).median_ms:.3f} ms but is not "
                "faster beyond noise, so the more accurate form wins")
    else:
        why += f"; the fastest of the forms within {bound}"
    over = [r for r in rows if r not in within]
    quicker = [r for r in over if _latency(r).median_ms < lat.median_ms]
    if quicker:
        why += f"; faster but over {bound}: " + ", ".join(
            f"{r.label} ({_latency(r).median_ms:.3f} ms, error {_error(r):.3g})"
            for r in quicker)
    return chosen, why
