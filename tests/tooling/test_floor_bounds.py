"""setup.cfg's lower bounds are the floor `make test-min` installs (constraints-min.txt,
docs/testing.md, "The support window"): a bound raised or lowered in one file and not the
other would claim a version no lane has run."""

from __future__ import annotations

import configparser
import re

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import ROOT

ONLY_IN_THE_FLOOR = {"onnx-ir"}  # onnxscript's, pinned so the floor is one reproducible set


def _floor() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints-min.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def _lower_bounds(*sections: str) -> dict[str, Version]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines()
    for extra in sections:
        lines += cfg["options.extras_require"][extra].splitlines()
    bounds = {}
    for line in lines:
        line = re.sub(r"#.*", "", line).strip()
        if line:
            req = Requirement(line)
            low = [Version(s.version) for s in req.specifier if s.operator == ">="]
            assert low, f"setup.cfg: {line} has no lower bound"
            bounds[canonicalize_name(req.name)] = low[0]
    return bounds


def test_every_lower_bound_is_the_floor_make_test_min_installs() -> None:
    floor = _floor()
    bounds = _lower_bounds("cpu", "examples", "hf")  # the extras test-min installs, and hf
    assert {n: floor.get(n) for n in bounds} == bounds
    assert set(floor) - set(bounds) == ONLY_IN_THE_FLOOR
