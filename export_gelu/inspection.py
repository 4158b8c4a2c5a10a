"""`export-gelu inspect`: what each target would make of an ONNX file, without a GPU.

For every target profile: does it parse the file as is, and if not why not (the static check
of `compat.py`); and would `export-gelu FILE --target T` fit it (a dry run of the ONNX-level
passes on a copy), or what stops it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from export_gelu.compat import compatibility_table, incompatibilities, model_opset, op_counts
from export_gelu.errors import ExportGeluError
from export_gelu.targets import PROFILES, TargetProfile


def fit_after_export(model: onnx.ModelProto, profile: TargetProfile) -> dict[str, Any]:
    """Dry run of `export-gelu MODEL.onnx --target profile` on a copy: fits, and the changes."""
    from export_gelu.passes.compat import fit_to_profile
    from export_gelu.passes.onnx import run_onnx_passes

    work = onnx.ModelProto()
    work.CopyFrom(model)
    try:
        work, sites = run_onnx_passes(work, profile, "keep", "fp32")
        work, notes = fit_to_profile(work, profile)
    except ExportGeluError as exc:
        return {"fits": False, "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a dry run reports, it does not crash inspect
        return {"fits": False, "reason": f"could not check: {type(exc).__name__}: {exc}"}
    problems = incompatibilities(work, profile)
    if problems:
        return {"fits": False, "reason": "; ".join(problems)}
    changed = [s for s in sites if not s.action.startswith("kept")]
    changes = [f"{len(changed)} GELU site(s) rewritten"] if changed else []
    return {"fits": True, "changes": changes + notes, "opset": model_opset(work)}


def inspect_onnx(path: str | Path, targets: list[str] | None = None,
                 dry_run: bool = True) -> dict[str, Any]:
    """GELU sites, op census and per-target verdicts for the ONNX file at `path`."""
    from export_gelu.passes.onnx import find_sites

    model = onnx.load(str(path), load_external_data=True)
    profiles = [PROFILES[t] for t in targets] if targets else list(PROFILES.values())
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    sites = find_sites(probe)
    info: dict[str, Any] = {
        "model": str(path),
        "opset": model_opset(model),
        "ir_version": int(model.ir_version),
        "op_counts": dict(sorted(op_counts(model).items())),
        "gelu_sites": [s.to_json() for s in sites],
        "compatibility": compatibility_table(model, profiles),
    }
    if dry_run:
        info["after_export"] = {p.name: fit_after_export(model, p) for p in profiles}
    return info


def format_table(info: dict[str, Any]) -> str:
    """The plain-text view `export-gelu inspect` prints."""
    sites = info["gelu_sites"]
    lines = [f"{info['model']}: opset {info['opset']}, IR {info['ir_version']}, "
             f"{len(sites)} GELU site(s)"]
    for s in sites:
        lines.append(f"  {s['name']:<40} {s['kind']:<6} {s['source']}")
    after = info.get("after_export", {})
    lines.append(f"{'target':<8} {'as is':<6} {'after export-gelu':<18} why not (as is)")
    for name, reasons in info["compatibility"].items():
        fit = after.get(name)
        verdict = "-" if fit is None else ("fits" if fit["fits"] else "no")
        lines.append(f"{name:<8} {'yes' if not reasons else 'no':<6} {verdict:<18} "
                     f"{'; '.join(reasons)}".rstrip())
    blocked = {n: f["reason"] for n, f in after.items() if not f["fits"]}
    for name, reason in blocked.items():
        lines.append(f"  {name}: export-gelu cannot fit it: {reason}")
    return "\n".join(lines)
