"""The tolerances a parity check uses: one function decides them for every command, from the
precision, the error a GELU form change adds, what the user gave, and what a bundle recorded.

Polygraphy's rule applies: an element fails only if abs > atol AND rel > rtol.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Default (atol, rtol) by precision; "fp64": a float64 model checked in float64.
DEFAULT_TOLERANCES = {"fp32": (1e-4, 1e-3), "fp16": (2e-2, 2e-2), "bf16": (1e-1, 5e-2),
                      "fp64": (1e-10, 1e-9)}
#: How many times a form's worst-case pointwise error a whole model may amplify it, by default.
FORM_ERROR_HEADROOM = 20.0


@dataclass(frozen=True)
class Tolerances:
    atol: float
    rtol: float


def resolve_tolerances(precision: str, *, added_error: float = 0.0, atol: float | None = None,
                       rtol: float | None = None, recorded: Mapping[str, Any] | None = None
                       ) -> Tolerances:
    """The tolerances to check with: `atol`/`rtol` as given (`--atol`, `--rtol`), else those a
    device bundle `recorded` when it was made, else the precision's defaults, atol widened to
    `added_error` × FORM_ERROR_HEADROOM when a GELU form change adds known error."""
    d_atol, d_rtol = DEFAULT_TOLERANCES.get(precision, DEFAULT_TOLERANCES["fp32"])
    d_atol = max(d_atol, added_error * FORM_ERROR_HEADROOM)
    recorded = recorded or {}
    return Tolerances(atol if atol is not None else float(recorded.get("atol", d_atol)),
                      rtol if rtol is not None else float(recorded.get("rtol", d_rtol)))
