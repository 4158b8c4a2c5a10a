"""`--report-md`: the Markdown report with its tables and PNG plots (matplotlib, Agg)."""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.conftest import run_cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _have_matplotlib() -> bool:
    from export_gelu.report.plots import matplotlib_missing

    return matplotlib_missing() is None


def _valid_png(path) -> tuple[int, int]:
    """(height, width) of a PNG that matplotlib can decode."""
    import matplotlib.image as mpimg

    assert path.read_bytes()[:8] == PNG_MAGIC
    pixels = mpimg.imread(str(path))
    assert pixels.ndim == 3 and pixels.std() > 0.01  # an image with content, not blank
    return pixels.shape[0], pixels.shape[1]


@pytest.fixture(scope="module")
def lstm_onnx(saved_model, tmp_path_factory):
    d = tmp_path_factory.mktemp("md")
    model = saved_model("lstm", "exported")
    out = d / "lstm.onnx"
    assert run_cli(model, "--target", "onnx", "-o", out, "--no-verify").code == 0
    return model, out


def test_verify_markdown_report_with_plots(lstm_onnx, tmp_path):
    if not _have_matplotlib():
        pytest.skip("matplotlib is not installed (pip install export-gelu[plot])")
    model, onnx_path = lstm_onnx
    md, js = tmp_path / "report.md", tmp_path / "report.json"
    res = run_cli("verify", model, onnx_path, "--iterations", "3", "--report-md", md,
                  "--report", js)
    assert res.code == 0, res.err + res.out
    text = md.read_text()
    rep = json.loads(js.read_text())
    output = next(iter(rep["parity"]["outputs"]))
    stats = rep["parity"]["outputs"][output]
    assert text.startswith("# export-gelu verify report")
    assert "**PASSED**" in text
    assert re.search(rf"^\| `{re.escape(output)}` \| ok \| {stats['max_abs']:.3g} \|", text, re.M)
    assert "## Latency" in text and "## GELU input ranges" in text
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", text)
    assert images == ["report.gelu-forms.png", "report.errors.png"]
    for name in images:
        h, w = _valid_png(tmp_path / name)
        assert h > 200 and w > 500
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "report.errors.png", "report.gelu-forms.png", "report.json", "report.md"]


def test_export_markdown_report(saved_model, tmp_path):
    md = tmp_path / "export.md"
    res = run_cli(saved_model("gpt2", "exported"), "--target", "onnx", "-o", tmp_path / "g.onnx",
                  "--iterations", "3", "--report-md", md)
    assert res.code == 0, res.err
    text = md.read_text()
    assert text.startswith("# export-gelu export report")
    assert "## GELU sites" in text and text.count("| tanh |") == 2
    if _have_matplotlib():
        assert (tmp_path / "export.errors.png").is_file()
        _valid_png(tmp_path / "export.gelu-forms.png")


def test_without_matplotlib_the_report_says_why(lstm_onnx, tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    model, onnx_path = lstm_onnx
    md = tmp_path / "r.md"
    res = run_cli("verify", model, onnx_path, "--iterations", "0", "--report-md", md)
    assert res.code == 0, res.err
    text = md.read_text()
    assert "Plots skipped: matplotlib is not installed" in text and "export-gelu[plot]" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.md"]


def test_report_md_into_a_missing_directory_exits_2_before_work(lstm_onnx, tmp_path):
    model, onnx_path = lstm_onnx
    res = run_cli("verify", model, onnx_path, "--report-md", tmp_path / "nope" / "r.md")
    assert res.code == 2 and "does not exist" in res.err
    res = run_cli(model, "-o", tmp_path / "x.onnx", "--report-md", tmp_path / "nope" / "r.md")
    assert res.code == 2 and not (tmp_path / "x.onnx").exists()


def test_report_json_has_latency_spread_and_calibration(lstm_onnx, tmp_path):
    model, onnx_path = lstm_onnx
    js = tmp_path / "r.json"
    assert run_cli("verify", model, onnx_path, "--iterations", "4", "--report", js).code == 0
    rep = json.loads(js.read_text())
    for key in ("target", "output", "opset", "gelu_sites", "parity", "trt", "latency"):
        assert key in rep
    lat = rep["latency"]["onnxruntime"]
    assert {"median_ms", "p90_ms", "p99_ms", "median_ci_ms", "spread_pct", "clock"} <= set(lat)
    sites = rep["calibration"]["sites"]
    assert len(sites) == 1 and sites[0]["kind"] == "exact" and sites[0]["count"] == 4 * 64
