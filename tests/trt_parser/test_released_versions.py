"""`--target trtX.Y` names a released TensorRT only (trt_parser/versions.py RELEASED_LINES):
8.3 was never released, and a version past the newest known is not guessed at."""

from __future__ import annotations

import pytest

from export_gelu.errors import BadInputError
from export_gelu.targets import resolve_profile
from tests.conftest import run_cli


@pytest.mark.parametrize("name,near", [("trt8.3", "trt8.2 and trt8.4"),
                                       ("trt8.1", "trt8.0 and trt8.2"),
                                       ("trt9.4", "trt9.3 and trt10.0")])
def test_an_unreleased_version_is_refused_naming_the_releases_either_side(
        name: str, near: str) -> None:
    with pytest.raises(BadInputError, match=rf"was never released \(the releases either side: "
                                            rf"{near}\)"):
        resolve_profile(name)


def test_a_version_past_the_newest_release_is_refused() -> None:
    with pytest.raises(BadInputError, match=r"newer than the newest release known \(trt11\.5\)"):
        resolve_profile("trt11.6")


@pytest.mark.parametrize("name", ["trt8.2.3", "trt8.4", "trt9.3", "trt10.16", "trt11.5"])
def test_released_versions_and_their_patches_are_targets(name: str) -> None:
    assert resolve_profile(name).name == name


def test_the_cli_exits_2_on_trt83_before_any_work(tmp_path) -> None:
    res = run_cli(tmp_path / "absent.pt", "--target", "trt8.3")
    assert res.code == 2
    assert "TensorRT 8.3 was never released" in res.err
