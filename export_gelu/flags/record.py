"""What every options record does, whatever its fields: values as the record holds them
(sequences as tuples, paths as strings, so a record equals its JSON round trip), and to and
from the report's `options` block."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, TypeVar

from export_gelu.json_value import JsonObject

_Record = TypeVar("_Record", bound="OptionsRecord")


def plain(value: object) -> object:
    """Sequences as tuples and paths as strings, so a record equals its JSON round trip."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return tuple(plain(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True)
class OptionsRecord:
    """The base of the options records (export_gelu/option_records.py, generated)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, plain(getattr(self, f.name)))

    def to_json(self) -> JsonObject:
        """Every field, JSON-ready (the report's `options`)."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls: type[_Record], data: Mapping[str, Any]) -> _Record:
        """The record a report's `options` block was written from."""
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})
