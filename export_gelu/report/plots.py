"""PNG plots for the Markdown report (matplotlib, Agg backend; the `plot` extra).

- GELU forms and their error against exact GELU over the input range the sites saw.
- Per-output histograms of |deployed − reference|, with the tolerance and the max marked.
- GELU forms timed on a device: median latency with its spread, per form, the chosen marked.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.atomic import written_file
from export_gelu.device.choice import DeviceForms
from export_gelu.shown import label

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from export_gelu.check.calibration import Calibration
    from export_gelu.check.localize.divergence import Localization

#: Plot at least this input range, so a narrow observed range still shows the curves' shape.
MIN_SPAN = 8.0


def matplotlib_missing() -> str | None:
    """None when matplotlib imports; else why plots are skipped, in words."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means no plots
        return (f"matplotlib is not installed ({type(exc).__name__}); "
                "pip install 'export-gelu[plot]' for plots")
    return None


def _save(fig: Figure, out: Path) -> Path:
    import matplotlib.pyplot as plt

    with written_file(out) as staged:
        fig.savefig(staged, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def observed_range(calibration: Calibration | None) -> tuple[float, float] | None:
    sites = getattr(calibration, "sites", None) or []
    if not sites:
        return None
    return min(s.min for s in sites), max(s.max for s in sites)


def forms_title(calibration: Calibration | None) -> str:
    """The forms plot's title (and the report's caption for it): the range the sites saw, or
    the default range when no inputs were recorded (never the first when it is the second)."""
    seen = observed_range(calibration)
    if seen is None:
        return "GELU forms over a default range −4…4 (no GELU inputs recorded)"
    return f"GELU forms over the input range the GELU sites saw ({seen[0]:.3g}…{seen[1]:.3g})"


def plot_gelu_forms(calibration: Calibration | None, out: Path) -> Path:
    """Exact, tanh and sigmoid GELU over the observed range, and each form's |error|."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from export_gelu.check.calibration import gelu_exact, gelu_sigmoid, gelu_tanh

    seen = observed_range(calibration)
    lo, hi = seen if seen else (-4.0, 4.0)
    mid, span = (lo + hi) / 2, max(hi - lo, MIN_SPAN)
    x = np.linspace(min(lo, mid - span / 2), max(hi, mid + span / 2), 2001)
    exact = gelu_exact(x)
    forms = {"tanh approximation": gelu_tanh(x), "sigmoid x·σ(1.702x)": gelu_sigmoid(x)}

    seen_values = [s.samples for s in getattr(calibration, "sites", None) or [] if s.samples.size]
    panels = 3 if seen_values else 2
    fig, axes = plt.subplots(panels, 1, figsize=(7.5, 2.9 * panels), sharex=True,
                             gridspec_kw={"height_ratios": [3, 3, 2][:panels]})
    top, bottom = axes[0], axes[1]
    top.plot(x, exact, color="black", lw=2, label="exact (erf)")
    for (name, y), style in zip(forms.items(), ("--", ":")):
        top.plot(x, y, style, lw=1.6, label=name)
    top.set_ylabel("GELU(x)")
    top.set_title(forms_title(calibration))
    for (name, y), color in zip(forms.items(), ("tab:orange", "tab:green")):
        bottom.semilogy(x, np.maximum(np.abs(y - exact), 1e-12), color=color, label=name)
    bottom.set_ylabel("|form − exact|")
    bottom.set_ylim(1e-9, 1e-1)
    if seen:
        for ax in axes:
            ax.axvspan(lo, hi, color="tab:blue", alpha=0.08,
                       label="observed range" if ax is not axes[-1] else None)
    else:
        bottom.text(0.02, 0.05, "no calibration data: default range", transform=bottom.transAxes)
    if seen_values:
        hist = axes[2]
        hist.hist(np.concatenate(seen_values), bins=120, color="tab:blue", alpha=0.8)
        hist.set_yscale("log")
        hist.set_ylabel("GELU inputs seen")
        n_sites = len(seen_values)
        inputs = calibration.inputs if calibration is not None else ""
        hist.set_title(f"inputs of {n_sites} GELU site(s) ({label(inputs, 120)})", fontsize=9)
    axes[-1].set_xlabel("GELU input x")
    for ax in axes:
        ax.grid(alpha=0.3)
    for ax in axes[:2]:
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return _save(fig, out)


def plot_error_histograms(errors: Mapping[str, np.ndarray], atol: float, out: Path,
                          max_outputs: int = 6) -> Path | None:
    """One histogram of log10 |deployed − reference| per output (at most `max_outputs`)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    items = [(n, e) for n, e in errors.items() if e.size][:max_outputs]
    if not items:
        return None
    fig, axes = plt.subplots(len(items), 1, figsize=(7.5, 2.6 * len(items)), squeeze=False)
    for ax, (name, err) in zip(axes[:, 0], items):
        err = err.astype(np.float64)
        zeros = int(np.count_nonzero(err == 0))
        logs = np.log10(err[err > 0])
        if logs.size:
            ax.hist(logs, bins=80, color="tab:blue", alpha=0.8)
        if zeros:
            ax.text(0.01, 0.92, f"{zeros} of {err.size} values identical (error 0, not shown)",
                    transform=ax.transAxes, fontsize=8)
        marks = [(atol, "atol", "tab:red"), (float(err.max()), "max", "black"),
                 (float(np.quantile(err, 0.999)), "p99.9", "tab:orange")]
        for value, what, color in marks:
            if value > 0:
                ax.axvline(np.log10(value), color=color, ls="--", lw=1.2,
                           label=f"{what} {value:.2g}")
        ax.set_title(f"{label(name)}: |deployed − reference| ({err.size} values)", fontsize=10)
        ax.set_xlabel("log10 absolute error")
        ax.set_ylabel("count")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, out)


def plot_error_by_depth(localization: Localization | None, out: Path) -> Path | None:
    """Each compared module's (or node's) max abs error against its depth in the graph, on a
    log scale, with atol and the first divergence marked; None when nothing was compared."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    if localization is None or not localization.modules:
        return None
    rows = localization.modules
    floor = 1e-12  # an exact match, drawn at the bottom of the log axis
    depth = np.array([r.depth for r in rows])
    err = np.array([max(r.max_abs, floor) if np.isfinite(r.max_abs) else np.nan for r in rows])
    ok = np.array([r.passed for r in rows])
    fig, ax = plt.subplots(figsize=(8.5, 3.6))
    ax.plot(depth, err, color="0.6", lw=1)
    ax.scatter(depth[ok], err[ok], s=14, color="tab:blue", label="within tolerance", zorder=3)
    ax.scatter(depth[~ok], err[~ok], s=18, color="tab:red", label="out of tolerance", zorder=3)
    first = localization.first
    if first is not None:
        ax.axhline(first.atol, color="tab:red", ls="--", lw=1, label=f"atol {first.atol:.2g}")
        at = next((r.depth for r in rows if r.tensor == first.tensor), None)
        if at is not None:
            ax.axvline(at, color="black", ls=":", lw=1,
                       label=f"first divergence: {label(first.torch_module or first.node)}")
    what = "module" if localization.method == "modules" else "node"
    ax.set_yscale("log")
    ax.set_xlabel(f"{what} depth (graph order)")
    ax.set_ylabel("max |deployed − PyTorch|" if what == "module" else "max |graph − wider|")
    ax.set_title(f"Error of each {what} output against depth ({len(rows)} compared)",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, out)


def plot_device_forms(forms: object, out: Path) -> bool:
    """Bars of each timed form's device median latency with its spread as error bars (the
    chosen form filled, forms that failed parity hatched); False when there is nothing to
    plot (not a device forms table, or no form timed)."""

    if not isinstance(forms, DeviceForms) or forms.kind != "device":
        return False
    timed = [(r, r.latency) for r in forms.rows if r.latency is not None]
    if not timed:
        return False
    import matplotlib.pyplot as plt

    rows = [r for r, _lat in timed]
    fig, ax = plt.subplots(figsize=(6.5, 0.6 * len(rows) + 1.5))
    medians = [lat.median_ms for _r, lat in timed]
    low = [lat.median_ms - lat.spread_ms[0] for _r, lat in timed]
    high = [lat.spread_ms[1] - lat.median_ms for _r, lat in timed]
    colors = ["tab:green" if r.chosen else "tab:gray" for r in rows]
    bars = ax.barh([label(r.label) for r in rows], medians, xerr=[low, high], color=colors,
                   capsize=4)
    for bar, r in zip(bars, rows):
        if r.passed is False:
            bar.set_hatch("//")
    ax.invert_yaxis()
    ax.set_xlabel("median GPU compute per inference (ms), bars: spread")
    ax.set_title(f"GELU forms on the device ({label(forms.runtime)}); green: chosen, hatched: "
                 "failed parity", fontsize=9)
    _save(fig, out)
    return True
