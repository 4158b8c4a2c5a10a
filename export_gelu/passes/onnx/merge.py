"""fx sites + ONNX sites → one list for the report (torch inputs keep their module paths).

Every node export-gelu exports records its module under torch's own metadata keys
(`pkg.torch.onnx.name_scopes`: […, "model.h.0.mlp.act", "gelu"]); a foreign TorchScript
export has it in its node names (`/model/h.0/mlp/act/Mul_1`). An ONNX site gets its module
path from either (`graph/provenance.py`), and is paired with the fx site of the same
module; the rest are paired in graph order.
"""

from __future__ import annotations

from dataclasses import replace

import onnx_graphsurgeon as gs

from export_gelu.graph import provenance
from export_gelu.passes.sites import GeluSite


def module_of(node: gs.Node) -> str:
    """The module path an exporter recorded for `node` (`graph/provenance.py`), or ""."""
    return provenance.module_of(node) or ""


def _combine(fx: GeluSite, ox: GeluSite) -> GeluSite:
    already = ox.action.removeprefix("kept: already ")
    onnx = (f"exported as {already}" if already != ox.action
            else f"exported as {ox.source}, {ox.action}")
    return replace(fx, action=f"{fx.action}; {onnx}",
                   added_max_error=fx.added_max_error + ox.added_max_error,
                   onnx_nodes=list(ox.onnx_nodes), emitted=list(ox.emitted))


def merge_sites(fx_sites: list[GeluSite], onnx_sites: list[GeluSite]) -> list[GeluSite]:
    """The fx site list, each with what it became at the ONNX level; ONNX-only sites after."""
    if not fx_sites:
        return list(onnx_sites)
    pair: dict[int, int] = {}
    by_module: dict[str, list[int]] = {}
    for j, ox in enumerate(onnx_sites):
        if ox.module:
            by_module.setdefault(ox.module, []).append(j)
    for i, fx in enumerate(fx_sites):
        cands = by_module.get(fx.module, []) if fx.module else []
        if len(cands) == 1 and sum(f.module == fx.module for f in fx_sites) == 1:
            pair[i] = cands[0]
    rest = [j for j in range(len(onnx_sites)) if j not in pair.values()]
    for i in range(len(fx_sites)):
        if i not in pair and rest:
            pair[i] = rest.pop(0)
    merged = []
    for i, fx in enumerate(fx_sites):
        if i in pair:
            merged.append(_combine(fx, onnx_sites[pair[i]]))
        else:
            merged.append(replace(fx, action=f"{fx.action}; not found in the exported graph"))
    merged += [onnx_sites[j] for j in rest]
    return merged
