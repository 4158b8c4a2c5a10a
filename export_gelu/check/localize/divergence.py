"""Where a deployed graph starts to differ from PyTorch: the first module, in graph order, whose
output is out of tolerance.

Each module the graph's nodes name (their provenance, `graph/provenance.py`) maps to the
tensor that leaves its scope last: the output of the last node of that scope which a node
outside the scope, or the graph's output, reads. Those tensors become extra outputs of a
copy of the graph (the user's file is never written), which runs once in ONNX Runtime; the
model's own modules record their outputs on the same feed (`module_outputs.py`). Each pair
of the same shape is judged with the run's tolerances, by the rule parity uses
(`parity.errors_of`); the first module out of tolerance is the first divergence: every
module before it in the graph, those that feed it included, is inside.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.check.localize.marked_run import run_with_outputs
from export_gelu.check.localize.ties import WAY_OUT as TIE_WAY_OUT
from export_gelu.check.localize.ties import TieSite, find_ties
from export_gelu.check.verdict.parity import ParityResult, diverged, errors_of, over_tolerance
from export_gelu.json_value import JsonObject
from export_gelu.shown import shown
from export_gelu.tolerances import Tolerances

if TYPE_CHECKING:
    import onnx_graphsurgeon as gs
    from torch import nn

    from export_gelu.check.localize.module_outputs import ModuleOutput
    from export_gelu.exporter.loading.loaded import LoadedModel


@dataclass
class FirstDivergence:
    """The node whose output is the first module output out of tolerance."""

    node: str
    op_type: str
    tensor: str
    torch_module: str
    source: str  # file.py:LINE of the model's code, or ""
    max_abs: float
    atol: float


@dataclass
class ModuleError:
    """One module's output, deployed graph vs PyTorch, in graph order."""

    module: str
    tensor: str
    depth: int  # position among the compared modules, in graph order
    max_abs: float
    ref_scale: float
    passed: bool


@dataclass
class Localization:
    """The first divergence (None: every compared module is inside), each module's error,
    and how the modules were found (`modules`: PyTorch's module outputs; `none`: nothing
    mapped, with the reason)."""

    first: FirstDivergence | None = None
    modules: list[ModuleError] = field(default_factory=list)
    method: str = "modules"
    reason: str = ""
    #: ops fed exact ties that decide their result (check/localize/ties.py), in graph order
    ties: list[TieSite] = field(default_factory=list)
    #: the first of them comes before the first divergence (or none was found): the cause
    tie_cause: bool = False

    def to_json(self) -> JsonObject:
        ties: JsonObject | None = (
            {"cause": self.tie_cause, "ops": [t.to_json() for t in self.ties],
             "way_out": TIE_WAY_OUT} if self.ties else None)
        return {"first_divergence": asdict(self.first) if self.first else None,
                "module_errors": [asdict(m) for m in self.modules],
                "localized_by": self.method, "localize_note": self.reason,
                "tie_order": ties}

    def line(self) -> str:
        """The one line the CLI prints."""
        if self.tie_cause and self.ties:
            return self._tie_line()
        f = self.first
        if f is None:
            if self.reason:
                return f"first divergence: none found ({self.reason})"
            if self.method == "nodes":
                return (f"first divergence: none found node by node ({len(self.modules)} node "
                        "outputs match the graph run in a wider precision; the graph names no "
                        "PyTorch module, so a wrong weight or constant cannot be placed)")
            return (f"first divergence: none ({len(self.modules)} module outputs within "
                    "tolerance)")
        # the file's name and line (the report keeps the path as the exporter recorded it)
        where = (f", {shown(f.source.replace(chr(92), '/').rsplit('/', 1)[-1])}" if f.source
                 else "")
        module = shown(f.torch_module) if f.torch_module else "(no module)"
        return (f"first divergence: {module} — {shown(f.op_type)} {shown(f.node)}, max abs "
                f"{f.max_abs:.3g} > {f.atol:g}{where}")

    def _tie_line(self) -> str:
        """The tie-order op named as the cause, before the divergence downstream of it."""
        f = self.first
        after = (f" (the first {'module' if self.method == 'modules' else 'node'} out of "
                 f"tolerance after it: {shown(f.torch_module or f.node)}, max abs "
                 f"{f.max_abs:.3g})"
                 if f else "")
        more = f" (and {len(self.ties) - 1} more such op(s))" if len(self.ties) > 1 else ""
        return (f"first divergence: tie order at {self.ties[0].text()}{more}: PyTorch and the "
                "runtime may keep tied elements in a different order, so what it selects "
                f"differs downstream with no fault in the graph{after}; {TIE_WAY_OUT}")


def worth_localizing(parity: ParityResult | None, asked: bool) -> bool:
    """Whether a first divergence is looked for: parity failed because the graph's outputs
    differ (`parity.diverged`), or `--localize` asked on a run whose verdict a module
    comparison can speak to. Never where nothing diverged: a verdict that failed only because
    an output's reference says nothing (all 0, constant) and the graph matched it, nor a
    nondeterministic model (two runs of it differ: no graph can match, and a module compared
    with one of its runs diverges by chance)."""
    if parity is None or parity.status not in ("passed", "failed"):
        return False
    if parity.nondeterministic is not None:
        return False
    return diverged(parity) or asked


@dataclass
class _Site:
    """A module's boundary in the graph: the tensor leaving its scope, and its node."""

    module: str
    tensor: str
    node: gs.Node
    order: int


def module_sites(graph: gs.Graph, modules: Collection[str] | None = None) -> list[_Site]:
    """For each module path the nodes name (only those in `modules`, when given): the last
    tensor produced in its scope that leaves it, in graph order of that tensor's node."""
    from export_gelu.graph.provenance import scopes_of

    outputs = {t.name for t in graph.outputs}
    scope_sets = [set(scopes_of(n) or []) for n in graph.nodes]
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    found: dict[str, _Site] = {}
    for i, node in enumerate(graph.nodes):
        if node.op == "Constant":
            continue
        for path in scope_sets[i]:
            if modules is not None and path not in modules:
                continue
            for out in node.outputs:
                readers = [index.get(id(c), -1) for c in out.outputs]
                leaves = out.name in outputs or any(
                    r < 0 or path not in scope_sets[r] for r in readers)
                if leaves:
                    found[path] = _Site(path, out.name, node, i)
    return sorted(found.values(), key=lambda s: (s.order, -len(s.module)))


def compare_modules(sites: list[_Site], torch_values: Mapping[str, ModuleOutput],
                    graph_values: Mapping[str, np.ndarray], tol: Tolerances,
                    source_of: Callable[[gs.Node], str | None]) -> Localization:
    """Each site's tensor against its module's PyTorch output (same shape only), in graph
    order; the first out of tolerance is the first divergence."""
    loc = Localization()
    for site in sites:
        ref, got = torch_values.get(site.module), graph_values.get(site.tensor)
        if ref is None or got is None or tuple(np.shape(got)) != tuple(ref.value.shape):
            continue
        with np.errstate(all="ignore"):  # an inf or nan in the graph is a finding, not noise
            stats, _ = errors_of([ref.value], [got], tol.atol, tol.rtol)
        inside = not over_tolerance(stats, tol.atol)  # a zero matched is no divergence
        loc.modules.append(ModuleError(site.module, site.tensor, len(loc.modules),
                                       stats.max_abs, stats.ref_scale, inside))
        if not inside and loc.first is None:
            loc.first = FirstDivergence(site.node.name, site.node.op, site.tensor, site.module,
                                        source_of(site.node) or ref.call_site or "", stats.max_abs,
                                        tol.atol)
    if not loc.modules:
        loc.method, loc.reason = "none", "no module output of the graph matched PyTorch's"
    return loc


def module_tensors(loaded: LoadedModel, graph_path: Path) -> list[str]:
    """The graph's module-boundary tensors for `loaded`'s modules, in graph order ([] when
    none maps): what a device is asked to hand back besides the outputs."""
    import onnx

    from export_gelu import graph as G
    from export_gelu.check.localize.module_outputs import module_names

    names = module_names(loaded)
    if not names:
        return []
    with G.opened(onnx.load(str(graph_path), load_external_data=False)) as graph:
        return list(dict.fromkeys(s.tensor for s in module_sites(graph, names)))


def localize(loaded: LoadedModel, graph_path: Path, feed: Mapping[str, np.ndarray], tol: Tolerances,
             *, threads: int = 1, device: str = "cpu",
             recorded: Mapping[str, np.ndarray] | None = None,
             module: nn.Module | None = None) -> Localization:
    """The first divergence of the graph at `graph_path` from `loaded`'s modules on `feed`
    (as the graph takes it): the graph's module-boundary tensors from one ONNX Runtime run of
    a marked copy, or `recorded` (what a device handed back for them). `module`: the
    `nn.Module` whose submodules' outputs are the reference (default: the model's own)."""
    import onnx

    from export_gelu import graph as G
    from export_gelu.check.localize.module_outputs import module_names, record_module_outputs
    from export_gelu.graph.provenance import source_of

    names = module_names(loaded)
    if not names:
        return Localization(method="none", reason="the model has no PyTorch modules to "
                                                  "compare with (ONNX or TorchScript)")
    with G.opened(onnx.load(str(graph_path), load_external_data=False)) as graph:
        sites = module_sites(graph, names)
        if recorded is not None:
            sites = [s for s in sites if s.tensor in recorded]
        if not sites:
            return Localization(method="none", reason="the graph's nodes name none of the "
                                                      "model's modules (no provenance)"
                                if recorded is None else "the device handed back no "
                                                         "module-boundary tensor")
        torch_values = record_module_outputs(loaded, feed, {s.module for s in sites}, device,
                                             module=module)
        wanted = sorted({s.tensor for s in sites if s.module in torch_values})
        graph_values = (recorded if recorded is not None
                        else run_with_outputs(graph_path, wanted, feed, threads))
        return compare_modules(sites, torch_values, graph_values, tol, source_of)


def with_ties(loc: Localization, graph_path: Path, feed: Mapping[str, np.ndarray],
              threads: int = 1) -> Localization:
    """`loc` with the graph's tie-order ops fed deciding ties (`find_ties`), and whether the
    first of them is the cause: it comes before the first divergence in the graph, or no
    divergence was placed. Run only on a parity failure whose outputs diverged."""
    import onnx

    try:
        loc.ties = find_ties(graph_path, feed, threads)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - a diagnosis: the verdict and the rest stand
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        loc.reason = "; ".join(r for r in (loc.reason, f"tie check failed: {first}") if r)
        return loc
    if loc.ties:
        first_at = None
        if loc.first is not None:
            model = onnx.load(str(graph_path), load_external_data=False)
            first_at = next((i for i, n in enumerate(model.graph.node)
                             if n.name == loc.first.node), None)
        loc.tie_cause = first_at is None or loc.ties[0].order < first_at
    return loc
