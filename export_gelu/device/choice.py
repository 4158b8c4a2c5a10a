"""The GELU form chosen on the device: every form of a forms bundle judged against PyTorch on
what the device returned, timed by the device's own trtexec, and one picked.

The rule (docs/device-verification.md): among the forms that built, passed parity and were
timed, the fastest by median GPU compute time; but the exact (erf) form is kept unless the
fastest is faster beyond noise, i.e. its median's spread lies wholly below the erf form's.
A spread is the median's distribution-free 95% interval widened to at least ± the noise
floor (2.5%) and to the range of the medians of consecutive blocks of the run
(check.latency.Latency.spread_ms), so drift across the timing rounds widens it too.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from export_gelu.check.latency import Latency
from export_gelu.json_value import JsonObject
from export_gelu.shown import shown

#: The exact GELU; another form must beat it beyond noise to be chosen over it.
EXACT_FORM = "erf"


@dataclass
class DeviceFormRow:
    """One form of the bundle as the device ran it."""

    form: str
    same_as: list[str] = field(default_factory=list)
    built: bool = False
    build_error: str = ""  # trtexec's last line when it did not build
    passed: bool | None = None  # None: not judged (not built)
    max_abs: float | None = None
    reason: str = ""  # why parity failed
    latency: Latency | None = None
    rounds: int = 0  # timing files read
    dropped: int = 0  # warm-up entries dropped from them
    chosen: bool = False

    @property
    def label(self) -> str:
        return " = ".join([self.form, *self.same_as])

    @property
    def exact(self) -> bool:
        return EXACT_FORM in (self.form, *self.same_as)

    @property
    def median_ms(self) -> float | None:
        """The median of the device's times (None: not timed)."""
        return self.latency.median_ms if self.latency else None

    @property
    def spread_ms(self) -> tuple[float, float] | None:
        return self.latency.spread_ms if self.latency else None

    @property
    def spread_pct(self) -> float | None:
        return self.latency.spread_pct if self.latency else None

    def to_json(self) -> JsonObject:
        lat = self.latency
        return {"form": self.form, "same_as": self.same_as, "built": self.built,
                "build_error": self.build_error, "passed": self.passed,
                "max_abs": self.max_abs, "reason": self.reason,
                "median_ms": lat.median_ms if lat else None,
                "spread_ms": list(lat.spread_ms) if lat else None,
                "spread_pct": lat.spread_pct if lat else None,
                "latency": lat.to_json() if lat else None, "rounds": self.rounds,
                "warmups_dropped": self.dropped, "chosen": self.chosen}


@dataclass
class FormRun:
    """What the device left for one form: its row, its graph, its outputs."""

    row: DeviceFormRow
    graph: Path
    external_data: list[str] = field(default_factory=list)
    outputs: list[OrderedDict[str, np.ndarray]] | None = None  # per feed; None: not built
    outputs_file: Path | None = None


@dataclass
class DeviceForms:
    """The forms table of `verify --device-outputs DIR/outputs`."""

    runtime: str  # e.g. "tensorrt 8.6.1 (device)"
    atol: float
    rtol: float
    rows: list[DeviceFormRow] = field(default_factory=list)
    choice: str = ""
    notes: list[str] = field(default_factory=list)
    kind: str = "device"

    @property
    def chosen(self) -> DeviceFormRow | None:
        return next((r for r in self.rows if r.chosen), None)

    @property
    def chosen_form(self) -> str | None:
        """The form chosen (None: none built, passed and was timed)."""
        return self.chosen.form if self.chosen else None

    def to_json(self) -> JsonObject:
        return {"kind": self.kind, "runtime": self.runtime, "atol": self.atol,
                "rtol": self.rtol, "rows": [r.to_json() for r in self.rows],
                "chosen": self.chosen.form if self.chosen else None, "choice": self.choice,
                "notes": self.notes}

    def table(self) -> str:
        """form, device median, spread, max error, passed, built, chosen."""
        lines = [f"GELU forms on the device: {self.runtime}; median GPU compute ms over the "
                 f"timing rounds; error = max |device − PyTorch| (atol {self.atol:g}, "
                 f"rtol {self.rtol:g})",
                 f"  {'form':<16} {'built':<5} {'median ms':>10} {'spread ms':>19} "
                 f"{'max abs err':>11} {'parity':<7} chosen"]
        for r in self.rows:
            lat = r.latency
            spread = f"{lat.spread_ms[0]:.4g}–{lat.spread_ms[1]:.4g}" if lat else "–"
            median = f"{lat.median_ms:.4g}" if lat else "–"
            err = f"{r.max_abs:.3g}" if r.max_abs is not None else "–"
            parity = "–" if r.passed is None else "passed" if r.passed else "FAILED"
            lines.append(f"  {shown(r.label):<16} {'yes' if r.built else 'no':<5} {median:>10} "
                         f"{spread:>19} {err:>11} {parity:<7} {'*' if r.chosen else ''}")
            if not r.built and r.build_error:
                lines.append(f"      not built: {shown(r.build_error, 300)}")
        lines += [f"Note: {n}" for n in self.notes]
        if self.choice:
            lines.append(self.choice)
        return "\n".join(lines)


def beyond_noise(fast: Latency, slow: Latency) -> bool:
    """Whether `fast` is faster than `slow` beyond noise: its spread lies wholly below."""
    return fast.spread_ms[1] < slow.spread_ms[0]


def _median(row: DeviceFormRow) -> float:
    """A timed row's median (the rows it is asked of were filtered for a latency)."""
    assert row.latency is not None
    return row.latency.median_ms


def choose_device_form(table: DeviceForms) -> DeviceFormRow | None:
    """Mark and return the form chosen by the rule in the module docstring (None when no form
    built, passed and was timed); `table.choice` says why, in words."""
    ready = [r for r in table.rows if r.built and r.passed and r.latency is not None]
    if not ready:
        failed = [r.label for r in table.rows if r.built and r.passed is False]
        table.choice = ("device choice: none: no form built, passed parity and was timed"
                        + (f" (failed parity: {', '.join(failed)})" if failed else ""))
        return None
    fastest = min(ready, key=_median)
    exact = next((r for r in ready if r.exact), None)
    chosen = fastest
    assert fastest.latency is not None
    why = f"the fastest of the {len(ready)} form(s) that passed"
    if exact is not None and exact is not fastest:
        assert exact.latency is not None
        if beyond_noise(fastest.latency, exact.latency):
            why += (f", faster than the exact form {exact.label} beyond noise "
                    f"({fastest.latency.median_ms:.4g} vs {exact.latency.median_ms:.4g} ms)")
        else:
            chosen = exact
            why = (f"the exact form: {fastest.label} measured {fastest.latency.median_ms:.4g} "
                   f"ms against {exact.latency.median_ms:.4g} ms, not faster beyond noise "
                   "(spreads overlap)")
    chosen.chosen = True
    quicker = [r.label for r in table.rows if r.built and r.passed is False and r.latency
               is not None and r.latency.median_ms < _median(chosen)]
    table.choice = f"device choice: {chosen.label}: {why}"
    if quicker:
        table.choice += f"; faster but failed parity on the device: {', '.join(quicker)}"
    return chosen
