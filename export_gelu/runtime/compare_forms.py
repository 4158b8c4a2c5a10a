"""GELU forms side by side: export one model with each form, measure each graph's end-to-end
error against PyTorch and its latency (interleaved), and pick a form by measurement.

Every graph comes from `export()` itself (same passes, same exporters): `--target onnx` gives
the fused `Gelu` op, a primitives target (trt8.6) the expanded formula.
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from export_gelu.errors import BadInputError, ExportGeluError
from export_gelu.progress import Progress
from export_gelu.runtime.latency import Latency
from export_gelu.runtime.parity import OutputError

FORMS = ("keep", "erf", "tanh", "sigmoid")
#: Fused `Gelu` (opset 20, dynamo exporter) and expanded primitives (opset 17, TorchScript).
DEFAULT_TARGETS = ("onnx", "trt8.6")
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

    @property
    def label(self) -> str:
        return " = ".join([self.form, *self.same_as])

    @property
    def key(self) -> str:
        return f"{self.label} @ {self.target}"

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "form": self.form, "same_as": self.same_as, "target": self.target,
            "graph": self.graph, "layout": self.layout, "opset": self.opset,
            "exporter": self.exporter, "max_abs": self.max_abs, "mean_abs": self.mean_abs,
            "outputs": {n: asdict(o) for n, o in self.outputs.items()},
            "latency": self.latency.to_json() if self.latency else None,
            "ratio_to_fastest": self.ratio, "error": self.error,
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
        return min(rows, key=lambda r: r.latency.median_ms) if rows else None  # type: ignore

    def row(self, form: str, target: str | None = None) -> FormRow:
        """The row that `form` produced (also when it merged into another form's graph)."""
        for r in self.rows:
            if (form == r.form or form in r.same_as) and target in (None, r.target):
                return r
        raise KeyError(f"{form} @ {target}")

    def to_json(self) -> dict[str, Any]:
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
                fastest.latency) else " "  # type: ignore[arg-type]
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


def _graph_ops(model: Any) -> tuple[str, str]:
    from export_gelu.compat import op_counts

    counts = {k.split(".")[-1]: 0 for k in _GELU_OPS}
    for op, n in op_counts(model).items():
        short = op.split(".")[-1]
        if short in counts:
            counts[short] += n
    text = " ".join(f"{op}×{n}" for op, n in counts.items() if n) or "none"
    fused = any(counts[op] for op in _FUSED_OPS)
    return text, "fused" if fused else "expanded"


def _fingerprint(model: Any) -> str:
    return hashlib.sha256(model.graph.SerializeToString()).hexdigest()


def _positional_outputs(outputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    return list(outputs.values())


def compare_forms(model: str | Path, *, targets: Sequence[str] = DEFAULT_TARGETS,
                  forms: Sequence[str] = FORMS, inputs: Sequence[str] = (),
                  inputs_npz: str | Path | None = None, precision: str = "fp32",
                  allow_pickle: bool = False, model_factory: str | None = None,
                  threads: int = 1, iterations: int = 50, warmup: int = 5,
                  workdir: str | Path | None = None, device: str | None = None,
                  progress: Progress | None = None) -> FormsComparison:
    """Export `model` with each GELU form for each target and measure every graph.

    Graphs that come out identical (e.g. `keep` and `tanh` on a tanh model) are measured once
    and shown as one row (`keep = tanh`). Errors are end-to-end against the original PyTorch
    model on the same inputs; latencies come from one interleaved run of every graph and the
    PyTorch model, in ONNX Runtime with `threads` intra-op threads. `workdir` keeps the graphs
    (default: a temporary directory, removed afterwards).
    """
    import onnx
    import torch

    from export_gelu.api import export
    from export_gelu.exporter.feeds import resolve_feed
    from export_gelu.exporter.load import load_model
    from export_gelu.runtime.deployed import feed_for, open_deployed
    from export_gelu.runtime.devices import ready_runners, resolve_device
    from export_gelu.runtime.latency import measure_latency
    from export_gelu.runtime.parity import errors_of
    from export_gelu.runtime.torch_runner import TorchRunner

    progress = progress or Progress(enabled=False)
    if threads < 1:
        raise BadInputError("--threads must be at least 1")
    if iterations < 1:
        raise BadInputError("--iterations must be at least 1 to compare forms")
    bad = [f for f in forms if f not in FORMS]
    if bad:
        raise BadInputError(f"forms {', '.join(bad)}: compare takes {', '.join(FORMS)}")
    model_path = Path(model)
    progress.step(f"loading {model_path}")
    loaded = load_model(model_path, allow_pickle=allow_pickle, model_factory=model_factory)
    if loaded.is_onnx:
        raise BadInputError(f"{model_path}: comparing GELU forms needs the PyTorch model "
                            "(forms are applied while exporting it)")
    feed = resolve_feed(loaded, list(inputs), inputs_npz)
    torch.set_num_threads(threads)
    run_on = resolve_device(device).device
    where = "onnxruntime (CPU EP)" if run_on == "cpu" else "onnxruntime (CUDA EP)"
    result = FormsComparison(str(model_path), where, threads, iterations)

    with contextlib.ExitStack() as stack:
        if workdir is None:
            out_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gelu-forms-")))
        else:
            out_dir = Path(workdir)
            if not out_dir.is_dir():
                raise BadInputError(f"{out_dir}: not a directory")
        seen: dict[str, FormRow] = {}
        exporters: dict[str, str] = {}
        jobs = [(t, f) for t in targets for f in forms]
        for i, (target, form) in enumerate(jobs):
            progress.step(f"exporting form {i + 1}/{len(jobs)}: {form} for {target}")
            out = out_dir / f"{model_path.stem}.{form}.{target}.onnx"
            try:
                rep = export(model_path, target=target, output=out, gelu=form, inputs=inputs,
                             inputs_npz=inputs_npz, precision=precision, verify=False,
                             allow_pickle=allow_pickle, model_factory=model_factory,
                             threads=threads)
            except ExportGeluError as exc:
                result.rows.append(FormRow(form, target, error=str(exc)))
                continue
            graph = onnx.load(str(out), load_external_data=False)
            key = f"{target}:{_fingerprint(graph)}"
            if key in seen:
                seen[key].same_as.append(form)
                continue
            ops, layout = _graph_ops(graph)
            row = FormRow(form, target, graph=ops, layout=layout, opset=rep.opset,
                          exporter=rep.exporter, path=str(out))
            exporters[target] = f"{target}: opset {rep.opset}, {rep.exporter} exporter"
            seen[key] = row
            result.rows.append(row)

        measured = [r for r in result.rows if r.path]
        if not measured:
            raise BadInputError("no GELU form could be exported: "
                                + "; ".join(f"{r.form}@{r.target}: {r.error}" for r in result.rows))
        from export_gelu.exporter.call_plan import plan_for
        from export_gelu.exporter.model_dtype import model_float_dtype

        module = loaded.reference_module()
        reference = TorchRunner(module, feed, [], device=run_on, name="pytorch",
                                plan=plan_for(loaded, list(feed)),
                                float_dtype=model_float_dtype(module))
        runners = [reference]
        feeds = {}
        for r in measured:
            dep = open_deployed(r.path)  # type: ignore[arg-type]
            runner = next(run.runner for run in ready_runners(r.path, run_on, precision, threads)
                          if run.status == "ready")  # the CUDA EP on cuda, else the CPU
            runner.name = r.key
            feeds[r.key] = feed_for(dep, feed)
            runners.append(runner)
        for runner in runners:
            stack.enter_context(runner)
        progress.step("checking every form against PyTorch")
        ref_out = _positional_outputs(reference.infer(feed, check_inputs=False))
        for r, runner in zip(measured, runners[1:]):
            outs = runner.infer(feeds[r.key], check_inputs=False)
            if len(outs) != len(ref_out):
                r.error = f"{len(outs)} outputs, PyTorch gives {len(ref_out)}"
                continue
            for (name, out), ref in zip(outs.items(), ref_out):
                r.outputs[name] = errors_of([ref], [out], 0.0, 0.0)[0]
            r.max_abs = max(o.max_abs for o in r.outputs.values())
            r.mean_abs = float(np.mean([o.mean_abs for o in r.outputs.values()]))
        progress.step("timing every form (interleaved)")
        lat = measure_latency(runners, feed, iterations, warmup, progress, feeds_by_runner=feeds)
        progress.done()
    result.reference = lat.pop("pytorch")
    for r in measured:
        r.latency = lat[r.key]
        r.path = None if workdir is None else r.path
    fastest = result.fastest()
    for r in result.measured:
        r.ratio = r.latency.median_ms / fastest.latency.median_ms  # type: ignore[union-attr]
    if len(exporters) > 1:
        result.notes.append("targets differ beyond GELU (" + "; ".join(exporters.values())
                            + "): other ops can differ between their graphs too")
    result.notes.append("ONNX Runtime's own optimizer may fuse an expanded GELU at load time "
                        "(docs/onnxruntime.md); latencies are of the optimized sessions")
    result.notes.append("plugin form not compared: ONNX Runtime cannot run "
                        "CustomGeluPluginDynamic")
    return result


def choose_form(comparison: FormsComparison, atol: float, target: str | None = None
                ) -> tuple[FormRow, str]:
    """The fastest form whose measured error is within `atol`, and why, in words.

    Forms whose median latency cannot be told apart from the fastest (overlapping 95%
    intervals) count as equally fast; among those the most accurate is chosen.
    """
    rows = [r for r in comparison.measured if target in (None, r.target)
            and r.max_abs is not None]
    if not rows:
        raise BadInputError("no measured GELU form to choose from")
    within = [r for r in rows if r.max_abs <= atol]  # type: ignore[operator]
    if not within:
        best = min(rows, key=lambda r: r.max_abs)  # type: ignore[arg-type,return-value]
        return best, (f"gelu auto: no form stays within atol {atol:g}; the most accurate is "
                      f"{best.label} (max abs error {best.max_abs:.3g}), used anyway: parity "
                      "will say whether it passes")
    fastest = min(within, key=lambda r: r.latency.median_ms)  # type: ignore[union-attr]
    ties = [r for r in within if r.latency.overlaps(fastest.latency)]  # type: ignore[union-attr]
    chosen = min(ties, key=lambda r: r.max_abs)  # type: ignore[arg-type,return-value]
    lat = chosen.latency
    why = (f"gelu auto: chose {chosen.label} on {chosen.target} ({chosen.graph}): "
           f"{lat.median_ms:.3f} ms median, max abs error {chosen.max_abs:.3g} "  # type: ignore
           f"within atol {atol:g}")
    if chosen is not fastest:
        why += (f"; {fastest.label} measured {fastest.latency.median_ms:.3f} ms but is not "  # type: ignore
                "faster beyond noise, so the more accurate form wins")
    else:
        why += "; the fastest of the forms within atol"
    over = [r for r in rows if r not in within]
    quicker = [r for r in over if r.latency.median_ms < lat.median_ms]  # type: ignore
    if quicker:
        why += "; faster but over atol: " + ", ".join(
            f"{r.label} ({r.latency.median_ms:.3f} ms, error {r.max_abs:.3g})"  # type: ignore
            for r in quicker)
    return chosen, why


def forms_report(model: str | Path, *, targets: Sequence[str] = DEFAULT_TARGETS,
                 report: str | Path | None = None, report_md: str | Path | None = None,
                 **kwargs: Any) -> Any:
    """`export-gelu MODEL --compare-forms`: the comparison as a Report (table, ranges, notes)."""
    from export_gelu.exporter.feeds import resolve_feed
    from export_gelu.exporter.load import load_model
    from export_gelu.exporter.save import check_output_path
    from export_gelu.runtime.calibration import gelu_input_ranges
    from export_gelu.runtime.report import Report

    for path in filter(None, (report, report_md)):
        check_output_path(Path(path), [Path(model)])
    comparison = compare_forms(model, targets=targets, **kwargs)
    rep = Report(model=str(model), target=", ".join(targets), command="compare-forms",
                 threads=comparison.threads, forms=comparison,
                 precision=kwargs.get("precision", "fp32"))
    loaded = load_model(model, allow_pickle=kwargs.get("allow_pickle", False),
                        model_factory=kwargs.get("model_factory"))
    rep.model_format = loaded.format.value
    feed = resolve_feed(loaded, list(kwargs.get("inputs", ())), kwargs.get("inputs_npz"))
    label = ("real data from " + Path(kwargs["inputs_npz"]).name if kwargs.get("inputs_npz")
             else "not real data (example or --input), ranges are indicative")
    rep.inputs = label
    rep.calibration = gelu_input_ranges(loaded, [feed], label)
    from export_gelu.runtime.report import write_reports

    write_reports(rep, report, report_md)
    return rep


def export_with_best_form(model: str | Path, *, target: str = "trt", atol: float | None = None,
                          precision: str = "fp32", progress: Progress | None = None,
                          **export_kwargs: Any) -> Any:
    """`--gelu auto`: measure every form on `target`, export with the fastest one whose
    end-to-end error stays within `atol`, and say why in the report."""
    from export_gelu.api import export
    from export_gelu.exporter.save import check_output_path, write_text_atomic
    from export_gelu.runtime.parity import default_tolerances

    report = export_kwargs.pop("report", None)
    if report:
        check_output_path(Path(report), [Path(model)])
    limit = default_tolerances(precision)[0] if atol is None else atol
    keys = ("inputs", "inputs_npz", "allow_pickle", "model_factory", "threads", "iterations",
            "warmup", "device")
    shared = {k: export_kwargs[k] for k in keys if k in export_kwargs}
    comparison = compare_forms(model, targets=(target,), precision=precision, progress=progress,
                               **shared)
    chosen, why = choose_form(comparison, limit)
    comparison.choice = why
    rep = export(model, target=target, gelu=chosen.form, atol=limit, precision=precision,
                 progress=progress, **export_kwargs)
    rep.gelu_form = f"auto → {chosen.form}"
    rep.forms = comparison
    if report:
        write_text_atomic(rep.dumps(), Path(report))
    return rep
