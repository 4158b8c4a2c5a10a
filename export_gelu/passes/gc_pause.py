"""Pause Python's cyclic garbage collector while the passes build many small objects.

Rewriting a large graph allocates protobuf and graphsurgeon objects by the hundred thousand;
each allocation burst triggers a collection that walks every live object, the whole model
included, so pass time grew faster than the graph (`benchmarks/toolchain_cost.py`: the 100k-node
graph went from 21.1 s / 29.7 s to 15.1 s / 18.1 s). Reference counting still frees everything
the passes drop.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block (restored after, even on error)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
