"""The Python source generated from the flag declarations: the options records (frozen
dataclasses, one field per flag that a record holds) and the API's keywords (a TypedDict per
function, for `**keywords: Unpack[...]`), so mypy and editors see both as written code."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from export_gelu.flags.declare import RECORD_OF, ApiSpec, Flag, RecordSpec

HEADER = '''"""The options records and the Python API's keyword types, generated from the flag
declarations (export_gelu/flag_table/table.py) by `python -m export_gelu.cli_docs --write`:
do not edit; tests/cli/test_flag_table.py fails when this file differs from what they give.

One record per command, built alike by the CLI (from its flags) and the Python API (from its
keywords), checked by options.validate and recorded in the report (its `options` key).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from typing import TypedDict

from export_gelu.flags.record import OptionsRecord

__all__ = [
{names}
]
'''


def literal(value: Any) -> str:
    """A default as Python source: strings in double quotes, tuples of them."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, tuple):
        items = ", ".join(literal(v) for v in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    return repr(value)


def _holds(record: RecordSpec, flag: Flag) -> bool:
    """Whether `record` declares `flag`'s field itself (a run field only in RunOptions, unless
    the record's own declaration of the field overrides it)."""
    return record.key in flag.records


def _field_line(flag: Flag) -> str:
    line = f"    {flag.field_name}: {flag.field_type} = {literal(flag.default_value)}"
    comment = f"  # {flag.usage()}"
    return line + comment if len(line + comment) <= 100 else line


def render_record(record: RecordSpec, flags: Sequence[Flag]) -> str:
    fields = [_field_line(f) for f in flags if _holds(record, f)]
    return "\n".join(["@dataclass(frozen=True)", f"class {record.name}({record.base}):",
                      f'    """{record.doc}"""', "", *fields])


def render_keywords(api: ApiSpec, flags: Sequence[Flag]) -> str:
    lines = [f"class {api.typed}(TypedDict, total=False):",
             f'    """{api.function}()\'s keywords: the flags of '
             f'{", ".join(api.commands)}."""', ""]
    for flag in api.flags(tuple(flags)):
        lines += [f"    {k}: {flag.keyword_type}" for k in flag.api_keywords if k not in api.own]
    return "\n".join(lines)


def render_module(flags: Sequence[Flag], records: Sequence[RecordSpec],
                  apis: Sequence[ApiSpec]) -> str:
    """The whole generated module (export_gelu/option_records.py)."""
    missing = {r for f in flags for r in f.records} - {r.key for r in records}
    if missing or not set(RECORD_OF.values()) <= {r.key for r in records}:
        raise ValueError(f"records declared by flags but not specified: {sorted(missing)}")
    names = ",\n".join(f"    {json.dumps(n)}" for n in [*(r.name for r in records),
                                                         *(a.typed for a in apis)]) + ","
    parts = [HEADER.format(names=names)]
    parts += [render_record(r, flags) for r in records]
    parts += [render_keywords(a, flags) for a in apis]
    return "\n\n\n".join(p.rstrip("\n") for p in parts) + "\n"
