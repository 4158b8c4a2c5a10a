"""trtexec's precision flags per version: the records agree with every flag every trtexec
line parses (export_gelu/device/trtexec_flag_table.py, read from sampleOptions.cpp), and the
flags asked for each route are ones that trtexec takes."""

from __future__ import annotations

import pytest

from export_gelu.device.trtexec_flag_table import FLAGS as LINE_FLAGS
from export_gelu.device.trtexec_flags import accepted_flags
from export_gelu.quantize import route_for, trtexec_precision_flags
from export_gelu.quantize.flags import FLAGS, flag_taken
from export_gelu.targets import TRT_PROFILES, resolve_profile

#: trtexec 11 parses --int8 among its safety-build options only (sampleOptions.cpp@v11.0).
SAFETY_ONLY = {("--int8", "11")}


@pytest.mark.parametrize("line", sorted(LINE_FLAGS))
@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_records_match_the_flag_table(flag: str, line: str) -> None:
    version = line if "." in line else f"{line}.0"
    parsed = flag in accepted_flags(version)
    if (flag, line) in SAFETY_ONLY:
        assert parsed and not flag_taken(flag, version)
        return
    assert flag_taken(flag, version) == parsed


@pytest.mark.parametrize("profile", TRT_PROFILES, ids=lambda p: p.name)
def test_every_flag_asked_is_parsed(profile) -> None:
    for precision in ("int8", "fp8"):
        try:
            route = route_for(profile, precision)
        except Exception:  # noqa: BLE001 - fp8 before 9.0: refused, tested in test_routes
            continue
        build = trtexec_precision_flags(route, kept_layers=("node_a", "node_b"))
        accepted = accepted_flags(profile.trt_version)
        assert all(f.split("=")[0] in accepted for f in build.flags), build.flags


def test_flags_per_route() -> None:
    old = trtexec_precision_flags(route_for(resolve_profile("trt7.0"), "int8"),
                                  kept_layers=("fc",), cache_file="calib.cache")
    assert old.flags == ("--int8", "--calib=calib.cache", "--fp16")
    assert "left out of the calibration cache" in old.notes[0]
    pinned = trtexec_precision_flags(route_for(resolve_profile("trt8.6"), "int8"),
                                     kept_layers=("fc1", "fc2"))
    assert pinned.flags == ("--int8", "--fp16", "--precisionConstraints=obey",
                            "--layerPrecisions=fc1:fp32,fc2:fp32")
    assert trtexec_precision_flags(route_for(resolve_profile("trt10"), "fp8")).flags == (
        "--fp8", "--fp16")
    typed = trtexec_precision_flags(route_for(resolve_profile("trt11"), "int8"),
                                    kept_layers=("fc",))
    assert typed.flags == ()
    assert "strongly typed" in typed.notes[0] and "no Q/DQ" in typed.notes[1]
