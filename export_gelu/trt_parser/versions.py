"""TensorRT version strings ('8.2', '8.2.3', '10.13.0.35') compared as (major, minor, patch)."""

from __future__ import annotations

import re

VersionKey = tuple[int, int, int]


def version_key(version: str) -> VersionKey:
    """'8.2.3.0' → (8, 2, 3); missing parts are 0; text after the numbers is ignored."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]]
    major, minor, patch = (parts + [0, 0, 0])[:3]
    return major, minor, patch


def in_range(version: str, since: str | None = None, fixed_in: str | None = None) -> bool:
    """Whether `since` <= `version` < `fixed_in` (either bound may be open)."""
    key = version_key(version)
    if since is not None and key < version_key(since):
        return False
    return fixed_in is None or key < version_key(fixed_in)


def range_text(since: str | None = None, fixed_in: str | None = None) -> str:
    """'7.0 to before 8.2', 'from 8.2', 'before 8.5', 'every version'."""
    if since and fixed_in:
        return f"{since} to before {fixed_in}"
    if since:
        return f"from {since}"
    if fixed_in:
        return f"before {fixed_in}"
    return "every version"
