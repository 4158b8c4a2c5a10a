"""TensorRT version strings ('8.2', '8.2.3', '10.13.0.35') compared as (major, minor, patch)."""

from __future__ import annotations

import re

VersionKey = tuple[int, int, int]

#: Every TensorRT release line (major.minor) NVIDIA published, 7.0 to 11.5: the release
#: branches of NVIDIA/TensorRT (release/7.0 … release/11.1; no 8.1, 8.3 or 9.4+), the
#: onnx/onnx-tensorrt release PRs for 11.2 (#1061) and 11.3 (#1063), and the 11.5-GA notes
#: `ops.py` reads (11.4 comes between them). Any patch of a line is a release.
RELEASED_LINES: tuple[str, ...] = (
    "7.0", "7.1", "7.2", "8.0", "8.2", "8.4", "8.5", "8.6", "9.0", "9.1", "9.2", "9.3",
    *(f"10.{minor}" for minor in range(17)), *(f"11.{minor}" for minor in range(6)),
)


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


def released_line(version: str) -> bool:
    """Whether `version`'s major.minor is a TensorRT release line (`RELEASED_LINES`); any
    patch of a released line counts (`8.2.3`), since patches are not listed."""
    major, minor, _patch = version_key(version)
    return f"{major}.{minor}" in RELEASED_LINES


def nearest_released(version: str) -> list[str]:
    """The release lines just before and just after `version` (one or two)."""
    key = version_key(version)[:2]
    lines = [tuple(int(p) for p in line.split(".")) for line in RELEASED_LINES]
    before = [v for v in lines if v < key][-1:]
    after = [v for v in lines if v > key][:1]
    return [f"{a}.{b}" for a, b in before + after]
