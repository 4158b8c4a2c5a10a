"""A JSON value as Python holds it: what `json.loads` gives and what a record's `to_json`
returns (read-only containers, so a `dict[str, float]` or a `list[str]` is one too)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias, Union

#: null, a boolean, a number, a string, an array or an object of JSON values
JsonValue: TypeAlias = Union[  # noqa: UP007 - a recursive alias: its own name quoted inside
    None, bool, int, float, str, Sequence["JsonValue"], Mapping[str, "JsonValue"]]
#: a JSON object, as a record's `to_json` builds it
JsonObject: TypeAlias = dict[str, JsonValue]
