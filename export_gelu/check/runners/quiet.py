"""Keep polygraphy's logger quiet for the span of a call."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_polygraphy(*, silent: bool = False) -> Iterator[None]:
    """polygraphy's logger at errors only; `silent`: no log lines at all (the caller reports
    the verdict itself; polygraphy's errors still raise `PolygraphyException`)."""
    from polygraphy.logger import G_LOGGER

    old = G_LOGGER.module_severity
    G_LOGGER.module_severity = G_LOGGER.CRITICAL if silent else G_LOGGER.ERROR
    try:
        yield
    finally:
        G_LOGGER.module_severity = old
