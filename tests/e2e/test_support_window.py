"""The support window's subset (docs/testing.md, "The support window"): what `make test-min`
runs at the floor of every dependency (constraints-min.txt: torch 2.6) and `make
test-latest` at the newest releases, and `make test` at the pinned set. The issue's walk as
a new user takes it: every model format loads, the demo's model exports for trt, trt8.2 and
ort, verify passes, a Hugging Face folder exports for trt8.2 (its INT64_MAX slice end fixed
for TensorRT before 9), and a file of the other layout of torch.export.save loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

TIMING = ("--iterations", "2", "--warmup", "0")
pytestmark = pytest.mark.slow  # every row is also a fast test elsewhere: test_end_to_end's
# diagonal (formats, targets), test_verify, test_hf_folders' FAST rows; here they run as one
# lane at each end of the window


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from export_gelu.examples.save_model import save

    return save("gpt2", "exported", tmp_path_factory.mktemp("window") / "model.pt")


@pytest.mark.parametrize("target", ["trt", "trt8.2", "ort"])
def test_the_demo_exports(demo: Path, target: str, tmp_path: Path) -> None:
    res = run_cli(demo, "--target", target, "-o", tmp_path / "m.onnx", *TIMING)
    assert res.code == 0, res.err
    assert "Parity: PASSED" in res.out


def test_verify_passes(demo: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.onnx"
    assert run_cli(demo, "--target", "trt8.2", "-o", out, "--no-verify").code == 0
    res = run_cli("verify", demo, out, *TIMING)
    assert res.code == 0, res.err
    assert "Parity: PASSED" in res.out


@pytest.mark.parametrize("fmt,flags", [
    ("torchscript", ("--input", "x:2x16:int64:0,1000")),
    ("state_dict", ("--model-factory", "export_gelu.examples.models:bert",
                    "--input", "x:2x16:int64:0,1000")),
    ("pickle", ("--trust-model", "--input", "x:2x16:int64:0,1000")),
])
def test_every_format_loads_and_exports(fmt: str, flags: tuple[str, ...],
                                        tmp_path: Path) -> None:
    from export_gelu.examples.save_model import save

    model = save("bert", fmt, tmp_path / f"bert.{fmt}.pt")
    res = run_cli(model, *flags, "--target", "ort", "-o", tmp_path / "b.onnx", *TIMING)
    assert res.code == 0, res.err


def test_an_onnx_input_exports(demo: Path, tmp_path: Path) -> None:
    first = tmp_path / "first.onnx"
    assert run_cli(demo, "--target", "onnx", "-o", first, "--no-verify").code == 0
    res = run_cli(first, "--target", "trt8.6", "-o", tmp_path / "second.onnx", *TIMING)
    assert res.code == 0, res.err


def test_a_folder_exports_for_trt82(tmp_path: Path) -> None:
    from export_gelu.examples.hf_folders import save_folder

    folder = save_folder("bert", tmp_path / "tiny-bert")
    res = run_cli(folder, "--target", "trt8.2", "-o", tmp_path / "bert.onnx", *TIMING)
    assert res.code == 0, res.err
    assert "Check: trt8.2: parses as is" in res.out
