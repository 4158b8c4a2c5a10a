"""A keyword of the Python API that takes a sequence of strings (`imports`, `input`,
`dynamic`, `targets`, `nodes`, …), as the options records hold it: a tuple.

`tuple(value)` would take a string apart: `imports='os'` became the modules `o` and `s`,
each imported from the working directory (its code run). So a string (or a path) is one
item, as a flag given once is; bytes, a mapping, a number or an item that is not a string is
a TypeError naming the keyword.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any


def as_items(keyword: str, value: Any) -> tuple[str, ...]:
    """`value` as a tuple of strings: None → (); a str or path → (it,); an iterable of str
    (or paths) → its items; anything else a TypeError naming `keyword`."""
    if value is None:
        return ()
    if isinstance(value, (str, os.PathLike)):
        return (os.fsdecode(value),)
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{keyword}={value!r}: expected a string or a sequence of strings, not "
                        f"{type(value).__name__}")
    items = tuple(value)
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"{keyword}: {item!r} is a {type(item).__name__}, not a string")
    return tuple(os.fsdecode(i) for i in items)
