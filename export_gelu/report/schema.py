"""docs/report.schema.json, generated from the report's types (report/report.py: `Report`, and
the records it holds, each written as report/json_shape.py says):

    python -m export_gelu.report.schema --write     # regenerate docs/report.schema.json
    python -m export_gelu.report.schema --check     # exit 1 when the file is not what it says

tests/report/test_report_schema.py compares the committed file with the generated one and
validates every command's report against it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from export_gelu.flags.parsers import ToolFlag, tool_parser
from export_gelu.report.json_shape import Schema, schema_for
from export_gelu.report.report import SCHEMA_VERSION, Report

#: Where the schema lives in the repository.
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "report.schema.json"


def report_schema() -> Schema:
    """The JSON schema of the report."""
    return schema_for(
        Report,
        **{"$schema": "https://json-schema.org/draft/2020-12/schema",
           "$id": "https://github.com/export-gelu/export-gelu/docs/report.schema.json",
           "title": "export-gelu run report",
           "description": (f"What `--report r.json` writes for export, verify and "
                           f"--compare-forms (schema_version {SCHEMA_VERSION}), generated "
                           "from the report's types by python -m export_gelu.report.schema "
                           "--write.")})


def schema_text() -> str:
    return json.dumps(report_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = tool_parser(__doc__.splitlines()[0], (
        ToolFlag(("--write",), {"action": "store_true", "help": f"write {SCHEMA_FILE}"}),
        ToolFlag(("--check",), {"action": "store_true",
                                "help": "exit 1 when the file differs"})))
    args = ap.parse_args(argv)
    text = schema_text()
    if args.write:
        SCHEMA_FILE.write_text(text, encoding="utf-8")
        return 0
    if args.check:
        same = SCHEMA_FILE.is_file() and SCHEMA_FILE.read_text(encoding="utf-8") == text
        print(f"{SCHEMA_FILE}: {'up to date' if same else 'differs from the types'}")
        return 0 if same else 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
