"""Writing a report: JSON (`--report`) and Markdown with plots (`--report-md`), atomically."""

from __future__ import annotations

from pathlib import Path

from export_gelu.exporter.save import write_text_atomic
from export_gelu.report.markdown import write_markdown
from export_gelu.report.report import Report


def write_reports(rep: Report, report: str | Path | None = None,
                  report_md: str | Path | None = None) -> None:
    """Write `rep` as JSON (`--report`) and as Markdown with plots (`--report-md`)."""
    if report:
        write_text_atomic(rep.dumps(), Path(report))
    if report_md:
        write_markdown(rep, Path(report_md))
