"""The Markdown report (`--report-md report.md`): summary tables and, with matplotlib, plots."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from export_gelu.atomic import write_text_atomic
from export_gelu.device.choice import DeviceForms
from export_gelu.output_plan import plot_paths
from export_gelu.report.report import Report
from export_gelu.shown import md_code, md_text, terminal


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _words(text: object) -> str:
    """Our own words that may quote a name (a note, a reason): no control character, no HTML
    (`<`, `>`, `&` as entities), one line; their Markdown (code spans) kept."""
    flat = terminal(str(text)).replace("\n", " ")
    return flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _table(head: list[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines + [""]


def _g(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def _parity(rep: Report) -> list[str]:
    p = rep.parity
    verdict = {"passed": "**PASSED**", "failed": "**FAILED**"}.get(p.status, "skipped")
    lines = ["## Parity", ""]
    if p.status == "skipped":
        return lines + [f"Skipped: {_words(p.reason)}", ""]
    lines += [f"{verdict}: {' vs '.join(p.runners)}, atol {p.atol:g}, rtol {p.rtol:g} "
              f"(an element fails only if both are exceeded), {p.iterations} feed(s)."]
    if p.reason:
        lines += ["", _words(p.reason)]
    lines.append("")
    rows = [[md_code(n), "ok" if o.passed else "**FAIL**", _g(o.max_abs), _g(o.max_rel),
             _g(o.mean_abs), _g(o.p999_abs), _g(o.ref_scale), o.nonfinite]
            for n, o in p.outputs.items()]
    return lines + _table(["output", "verdict", "max abs", "max rel", "mean abs", "p99.9 abs",
                           "max abs ref", "non-finite"], rows)


def _divergence(rep: Report) -> list[str]:
    """The first divergence and the error of each module, in graph order."""
    loc = rep.divergence
    if loc is None:
        return []
    lines = ["## First divergence", "", md_code(loc.line(), 0), ""]
    rows = [[m.depth, md_code(m.module), md_code(m.tensor), _g(m.max_abs), _g(m.ref_scale),
             "ok" if m.passed else "**FAIL**"] for m in loc.modules]
    head = ["depth", "module" if loc.method == "modules" else "node", "tensor", "max abs",
            "max abs ref", "verdict"]
    return lines + (_table(head, rows) if rows else [])


def _latency(rep: Report) -> list[str]:
    if not rep.latency:
        return []
    rows = []
    floor = 0.0
    for name, lat in rep.latency.items():
        (lo, hi), (slo, shi) = lat.median_ci_ms, lat.spread_ms
        floor = lat.noise_floor_pct
        rows.append([md_text(name), f"{lat.median_ms:.3f}", f"{lo:.3f} – {hi:.3f}",
                     f"{slo:.3f} – {shi:.3f} (±{lat.spread_pct:.1f}%)", f"{lat.p90_ms:.3f}",
                     f"{lat.p99_ms:.3f}", lat.iterations, lat.warmup, lat.clock])
    return (["## Latency", "", f"{rep.threads} thread(s); runners interleaved; ms. The spread is "
             f"the median's 95% interval widened to at least ±{floor:g}% (separate sessions of "
             "one graph differ by that much); medians whose spreads overlap are not told apart.",
             ""]
            + _table(["runner", "median", "95% interval of median", "spread", "p90", "p99",
                      "runs", "warm-up", "what is timed"], rows))


def _device_forms(forms: DeviceForms) -> list[str]:
    """The forms table of a device run (device/choice.py's DeviceForms)."""
    rows = []
    for r in forms.rows:
        lat = r.latency
        rows.append([md_text(r.label), "yes" if r.built else f"no: {md_code(r.build_error, 300)}",
                     f"{lat.median_ms:.4g}" if lat else "–",
                     f"{lat.spread_ms[0]:.4g} – {lat.spread_ms[1]:.4g}" if lat else "–",
                     _g(r.max_abs) if r.max_abs is not None else "–",
                     "–" if r.passed is None else "passed" if r.passed else "FAILED",
                     "**chosen**" if r.chosen else ""])
    lines = ["## GELU forms on the device", "", f"{forms.runtime}: median GPU compute time "
             "(trtexec computeMs) over the interleaved timing rounds, ms; error is max "
             f"|device − PyTorch| over all outputs (atol {forms.atol:g}, rtol {forms.rtol:g}). "
             "A form is chosen over the exact (erf) one only when its spread lies wholly "
             "below erf's.", ""]
    lines += _table(["form", "built", "median ms", "spread ms", "max abs err", "parity",
                     "chosen"], rows)
    if forms.choice:
        lines += [_words(forms.choice), ""]
    return lines + [f"- {_words(n)}" for n in forms.notes] + ([""] if forms.notes else [])


def _forms(rep: Report) -> list[str]:
    forms = rep.forms
    if forms is None:
        return []
    if isinstance(forms, DeviceForms):
        return _device_forms(forms)
    rows = []
    for r in forms.rows:
        if r.latency is None:
            rows.append([md_text(r.label), r.target, "–", "–", "–", "–", "–", _words(r.error)])
            continue
        rows.append([md_text(r.label), r.target, md_text(r.graph), _g(r.max_abs), _g(r.mean_abs),
                     f"{r.latency.median_ms:.3f}", f"±{r.latency.spread_pct:.1f}%",
                     f"{r.ratio:.2f}"])
    if forms.reference is not None:
        rows.append(["pytorch (eager)", "", "reference", "0", "0",
                     f"{forms.reference.median_ms:.3f}", f"±{forms.reference.spread_pct:.1f}%", ""])
    lines = ["## GELU forms", "", f"{forms.runtime}, {forms.threads} thread(s), "
             f"{forms.iterations} interleaved runs; error is max |deployed − PyTorch| over all "
             "outputs.", ""]
    lines += _table(["form", "target", "graph", "max abs err", "mean abs err", "median ms",
                     "spread", "× fastest"], rows)
    if forms.choice:
        lines += [_words(forms.choice), ""]
    return lines + [f"- {_words(n)}" for n in forms.notes] + ([""] if forms.notes else [])


def _sites(rep: Report) -> list[str]:
    if not rep.gelu_sites:
        return []
    rows = [[md_code(s.label), s.kind, md_text(s.source), _words(s.action)]
            for s in rep.gelu_sites]
    return ["## GELU sites", ""] + _table(["site", "kind", "written as", "action"], rows)


def _calibration(rep: Report) -> list[str]:
    cal = rep.calibration
    if cal is None:
        return []
    lines = ["## GELU input ranges", "", f"Inputs: {_words(cal.inputs)}."]
    if not cal.sites:
        return lines + ["", f"Not recorded: {_words(cal.reason)}", ""]
    lines += ["", "\\|x\\| > 40: x³ overflows fp16 in a Pow-based tanh form. \\|x\\| > 6: "
              "values a clamp-at-6 'fix' would change. Worst form errors are over the observed "
              "range.", ""]
    rows = [[md_code(s.module or s.name), s.kind, s.count, _g(s.min), _g(s.max), _g(s.mean),
             _g(s.std), f"{s.share_abs_gt_6:.3%}", f"{s.share_abs_gt_40:.3%}", _g(s.tanh_max_error),
             _g(s.sigmoid_max_error)] for s in cal.sites]
    return lines + _table(["site", "kind", "values", "min", "max", "mean", "std", "|x| > 6",
                           "|x| > 40", "worst tanh err", "worst sigmoid err"], rows)


def render_markdown(rep: Report, images: dict[str, str], plots_note: str = "") -> str:
    """The report as Markdown; `images` maps a caption to a PNG path relative to the report."""
    title = "verify" if rep.command == "verify" else "export"
    lines = [f"# export-gelu {title} report", ""]
    facts = [("Model", f"{md_code(rep.model, 0)} ({rep.model_format})")]
    if rep.output:
        kind = "Deployed" if rep.command == "verify" else "Output"
        facts.append((kind, f"{md_code(rep.output, 0)} ({_words(rep.target)}, opset {rep.opset})"
                      if rep.opset else f"{md_code(rep.output, 0)} ({_words(rep.target)})"))
    else:
        facts.append(("Target", _words(rep.target)))
    facts.append(("Precision", rep.precision + (f" — {rep.precision_note}"
                                                if rep.precision_note else "")))
    if rep.inputs:
        facts.append(("Inputs", _words(rep.inputs)))
    if rep.generated_inputs:
        facts.append(("Generated inputs", "; ".join(f"{md_code(n)}: {_words(how)}" for n, how
                                                    in rep.generated_inputs.items())))
    if rep.command != "verify":
        device = f"; {rep.trt['device']}" if rep.trt.get("device") else ""
        facts.append(("TensorRT", _words(f"{rep.trt.get('status')}: "
                                         f"{rep.trt.get('reason') or ''}{device}")))
    lines += [f"- **{k}**: {v}" for k, v in facts] + [""]
    lines += (_parity(rep) + _divergence(rep) + _latency(rep) + _forms(rep) + _sites(rep)
              + _calibration(rep))
    if images or plots_note:
        lines += ["## Plots", ""]
        lines += [f"![{caption}]({path})\n" for caption, path in images.items()]
        if plots_note:
            lines += [plots_note, ""]
    if rep.notes:
        lines += ["## Notes", ""] + [f"- {_words(n)}" for n in rep.notes] + [""]
    return "\n".join(lines)


def write_markdown(rep: Report, out: Path) -> list[Path]:
    """Write `out` and its PNG plots beside it (`<stem>.gelu-forms.png`, `<stem>.errors.png`).

    Without matplotlib the report says why there are no plots. Returns the files written.
    """
    from export_gelu.report import plots

    out = Path(out)
    images: dict[str, str] = {}
    written: list[Path] = []
    missing = plots.matplotlib_missing()
    if missing is None:
        forms_png, errors_png = plot_paths(out)["forms"], plot_paths(out)["errors"]
        written.append(plots.plot_gelu_forms(rep.calibration, forms_png))
        images[plots.forms_title(rep.calibration)] = forms_png.name
        if plots.plot_error_histograms(rep.parity.error_samples, rep.parity.atol, errors_png):
            written.append(errors_png)
            images["Per-output error histograms"] = errors_png.name
        depth_png = plot_paths(out)["depth"]
        if plots.plot_error_by_depth(rep.divergence, depth_png):
            written.append(depth_png)
            images["Error against depth: where the graph starts to differ"] = depth_png.name
        device_png = plot_paths(out)["device_forms"]
        if plots.plot_device_forms(rep.forms, device_png):
            written.append(device_png)
            images["GELU forms on the device: median latency and spread"] = device_png.name
    note = f"Plots skipped: {missing}." if missing else ""
    write_text_atomic(render_markdown(rep, images, note), out)
    return [out, *written]
