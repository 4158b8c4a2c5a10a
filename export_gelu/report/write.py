"""Writing a report: JSON (`--report`) and Markdown with plots (`--report-md`), atomically."""

from __future__ import annotations

from pathlib import Path

from export_gelu.atomic import write_text_atomic
from export_gelu.options import RunOptions
from export_gelu.output_plan import plot_paths
from export_gelu.progress import Progress
from export_gelu.report.markdown import write_markdown
from export_gelu.report.report import Report


def write_reports(rep: Report, report: str | Path | None = None,
                  report_md: str | Path | None = None) -> None:
    """Write `rep` as Markdown with plots (`--report-md`), then as JSON (`--report`), whose
    `written` then lists the plots this run did write (and no plot it did not)."""
    if report_md:
        files = [str(f) for f in write_markdown(rep, Path(report_md))]
        plots = {str(p) for p in plot_paths(Path(report_md)).values()}
        rep.written = [w for w in rep.written if w not in plots]
        rep.written += [f for f in files if f not in rep.written]
    if report:
        write_text_atomic(rep.dumps(), Path(report))


def write_report(rep: Report, options: RunOptions, progress: Progress) -> Report:
    """The run's report written where its options say (`--report`, `--report-md`), once the
    progress line is done; `rep` itself, its `written` listing the plots too."""
    progress.done()
    write_reports(rep, getattr(options, "report", None), getattr(options, "report_md", None))
    return rep
