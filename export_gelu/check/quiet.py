"""Keep polygraphy's logger at errors only for the span of a call."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_polygraphy() -> Iterator[None]:
    from polygraphy.logger import G_LOGGER

    old = G_LOGGER.module_severity
    G_LOGGER.module_severity = G_LOGGER.ERROR
    try:
        yield
    finally:
        G_LOGGER.module_severity = old
