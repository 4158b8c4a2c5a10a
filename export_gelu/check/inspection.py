"""The judgements of `export-gelu inspect` (called by the inspect steps, steps/inspect.py):
what each target would make of an ONNX file, without a GPU.

For every target profile: does it parse the file as is, and if not why not (the static check
of `parse_check.py`); would `export-gelu FILE --target T` fit it (a dry run of the ONNX-level
passes on a copy), or what stops it; and, for TensorRT profiles, can this machine build and
run an engine of that version, or only the device (`--bundle DIR`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

import onnx

from export_gelu import graph as G
from export_gelu.errors import ExportGeluError
from export_gelu.parse_check import (
    format_targets,
    incompatibilities,
)
from export_gelu.shown import shown, terminal
from export_gelu.targets import TargetProfile


class _Fits(TypedDict):
    fits: bool


class Fit(_Fits, total=False):
    """A dry run's verdict for one target: fits, with the changes and the opset it ends at,
    or why not."""

    reason: str
    changes: list[str]
    opset: int


class EngineHere(TypedDict):
    """Can this machine build and run a TensorRT engine of a target's version."""

    here: bool
    reason: str
    device_only: bool


def fit_after_export(model: onnx.ModelProto, profile: TargetProfile) -> Fit:
    """Dry run of `export-gelu MODEL.onnx --target profile`: fits, and the changes. The passes
    edit a graph loaded from `model`, which is judged unsaved (`model` stays as it is)."""
    from export_gelu.passes.compat import fit_to_profile
    from export_gelu.passes.onnx import run_onnx_passes

    try:
        with G.opened(model) as graph:
            sites = run_onnx_passes(graph, profile, "keep", "fp32")[1]
            notes = fit_to_profile(graph, profile)[1]
            problems = incompatibilities(model, profile, graph=graph)
            opset = G.opset(graph)
    except ExportGeluError as exc:
        return {"fits": False, "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a dry run reports, it does not crash inspect
        return {"fits": False, "reason": f"could not check: {type(exc).__name__}: {exc}"}
    if problems:
        return {"fits": False, "reason": "; ".join(problems)}
    changed = [s for s in sites if not s.action.startswith("kept")]
    changes = [f"{len(changed)} GELU site(s) rewritten"] if changed else []
    return {"fits": True, "changes": changes + notes, "opset": opset}


def engine_here(profile: TargetProfile) -> EngineHere | None:
    """Can this machine build and run a TensorRT engine of `profile`'s version? None for
    targets that are not TensorRT; else {"here": bool, "device_only": bool, "reason": ""}.
    `device_only`: no installation here can (polygraphy's floor); only the device can, from
    a bundle (`--bundle DIR`)."""
    if profile.runtime != "trt":
        return None
    from export_gelu.check.runners.trt_runner import local_engine_blocker
    from export_gelu.trt_parser.capability import POLYGRAPHY_MIN_TRT
    from export_gelu.trt_parser.versions import in_range

    why = local_engine_blocker(profile.trt_version)
    return {"here": why is None, "reason": why or "",
            "device_only": in_range(profile.trt_version, fixed_in=POLYGRAPHY_MIN_TRT)}


def _origin(module: str | None, where: str | None, cls: str | None = None) -> str:
    """`  in blocks.2.act, model.py:41`: the module a site or node came from (its file
    shortened to its name), or "" when the graph does not record it."""
    if module is None:
        return ""
    text = (shown(module) if module else "the model itself") + (f" ({shown(cls)})" if cls
                                                                 else "")
    if where:
        path, _, line = where.rpartition(":")
        text += f", {shown(Path(path).name)}:{shown(line, 20)}"
    return f"  in {text}"


def format_table(info: dict[str, Any]) -> str:
    """The plain-text view `export-gelu inspect` prints: the graph's names shown by
    shown.py's rule, the whole once more through `terminal`."""
    return terminal(_table(info))


def _table(info: dict[str, Any]) -> str:
    sites = info["gelu_sites"]
    lines = [f"{info['model']}: opset {info['opset']}, IR {info['ir_version']}, "
             f"{len(sites)} GELU site(s)"]
    for s in sites:
        origin = _origin(s.get("module") or None, s.get("where"))
        lines.append(f"  {shown(s['name']):<40} {s['kind']:<6} {shown(s['source'])}{origin}")
    for n in info.get("nodes", []):
        origin = _origin(n["module"], n["source"], n["class"]) or "  (no module recorded)"
        lines.append(f"  node {shown(n['name'])}: {shown(n['op_type'])}{origin}")
    after = info.get("after_export", {})
    engines = info.get("engine_here", {})
    width = max(8, *(len(n) for n in info["compatibility"]))
    lines.append(f"{'target':<{width}} {'as is':<6} {'after export-gelu':<18} "
                 f"{'engine here':<12} why not (as is)")
    for name, reasons in info["compatibility"].items():
        fit = after.get(name)
        verdict = "-" if fit is None else ("fits" if fit["fits"] else "no")
        engine = engines.get(name)
        here = "-" if engine is None else ("yes" if engine["here"] else
                                           "device" if engine["device_only"] else "no")
        lines.append(f"{name:<{width}} {'yes' if not reasons else 'no':<6} {verdict:<18} "
                     f"{here:<12} {'; '.join(reasons)}".rstrip())
    blocked = {n: f["reason"] for n, f in after.items() if not f["fits"]}
    for name, reason in blocked.items():
        lines.append(f"  {name}: export-gelu cannot fit it: {reason}")
    device = [n for n, e in engines.items() if e["device_only"]]
    if device:
        from export_gelu.trt_parser.capability import POLYGRAPHY_MIN_TRT

        lines.append(f"  engine here: device only for {format_targets(device)} (polygraphy "
                     f"drives TensorRT {POLYGRAPHY_MIN_TRT} and newer only); build and check "
                     "them on the device with --bundle DIR")
    elsewhere = [n for n, e in engines.items() if not e["here"] and not e["device_only"]]
    if elsewhere:
        lines.append(f"  engine here: no for {format_targets(elsewhere)}: "
                     f"{engines[elsewhere[0]]['reason']}; or build and check them on the "
                     "device with --bundle DIR")
    return "\n".join(lines)
