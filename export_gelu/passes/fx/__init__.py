"""torch-level passes on a captured ExportedProgram: find, canonicalize and lower GELU."""

from __future__ import annotations

from typing import TYPE_CHECKING

from export_gelu.passes.fx.canonicalize import canonicalize_gelus, scalar_constants
from export_gelu.passes.fx.lower import lower_gelus
from export_gelu.passes.sites import GeluSite

if TYPE_CHECKING:
    from torch.export import ExportedProgram


def run_fx_passes(program: ExportedProgram, form: str = "keep") -> list[GeluSite]:
    """Canonicalize every GELU in `program` (in place), then lower to `form`; return sites."""
    gm = program.graph_module
    sites = canonicalize_gelus(gm, scalar_constants(program))
    lower_gelus(gm, sites, form)
    return sites


__all__ = ["run_fx_passes", "canonicalize_gelus", "lower_gelus"]
