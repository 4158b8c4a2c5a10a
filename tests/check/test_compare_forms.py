"""`--compare-forms` and `--gelu auto`: every form exported by export() itself, its end-to-end
error against PyTorch and its latency measured, and a choice made from the measurements."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import onnx
import pytest

from examples.models import EXAMPLES
from tests.conftest import run_cli

ITERATIONS = 8


@pytest.fixture(scope="module")
def bert_forms(saved_model, session_cache):
    """compare_forms on BERT: measured once (session_cache, pickled), read by each worker."""
    from export_gelu import compare_forms

    def build(path: Path) -> None:
        forms = compare_forms(saved_model("bert", "exported"), iterations=ITERATIONS, warmup=2)
        path.write_bytes(pickle.dumps(forms))

    return pickle.loads(session_cache.file("bert-forms.pickle", build).read_bytes())


def _check_measured(rows: list[dict], iterations: int) -> None:
    """Every latency comes from real timed runs: positive, ordered, the requested count."""
    for row in rows:
        lat = row["latency"]
        assert lat is not None, row
        assert lat["iterations"] == iterations
        assert 0 < lat["min_ms"] <= lat["median_ms"] <= lat["p90_ms"] <= lat["p99_ms"]
        lo, hi = lat["median_ci_ms"]
        assert lo <= lat["median_ms"] <= hi
        assert row["ratio_to_fastest"] >= 1.0
    assert min(r["ratio_to_fastest"] for r in rows) == pytest.approx(1.0)


def test_gpt2_table_from_the_cli(saved_model, tmp_path):
    rep_path = tmp_path / "forms.json"
    res = run_cli(saved_model("gpt2", "exported"), "--compare-forms", "--iterations",
                  str(ITERATIONS), "--warmup", "2", "--report", rep_path)
    assert res.code == 0, res.err + res.out
    assert res.err == ""
    out = res.out
    assert "GELU forms of" in out and "max abs err" in out and "× fastest" in out
    forms = json.loads(rep_path.read_text())["forms"]
    rows = forms["rows"]
    _check_measured(rows, ITERATIONS)
    by = {(r["form"], r["target"]): r for r in rows}
    for target in ("onnx", "trt8.6"):
        # GPT-2's gelu_new is the tanh form: keep and tanh export the identical graph
        assert by[("keep", target)]["same_as"] == ["tanh"]
        assert by[("sigmoid", target)]["max_abs"] > by[("keep", target)]["max_abs"]
        assert by[("sigmoid", target)]["max_abs"] > by[("erf", target)]["max_abs"]
        assert by[("erf", target)]["max_abs"] > by[("keep", target)]["max_abs"]
    assert by[("keep", "onnx")]["graph"] == "Gelu×2" and by[("keep", "onnx")]["layout"] == "fused"
    assert "Tanh×2" in by[("keep", "trt8.6")]["graph"]
    assert by[("keep", "trt8.6")]["layout"] == "expanded"
    assert forms["reference_latency"]["median_ms"] > 0
    for r in rows:  # each table line shows the measured numbers
        assert f"{r['latency']['median_ms']:.3f}" in out


def test_bert_sigmoid_error_exceeds_tanh_and_rows_are_real(bert_forms):
    rows = {(r.form, r.target): r for r in bert_forms.rows}
    for target in ("onnx", "trt8.6"):
        keep, tanh, sigmoid = rows[("keep", target)], rows[("tanh", target)], \
            rows[("sigmoid", target)]
        assert keep.same_as == ["erf"]  # BERT's GELU is exact: keep is the erf form
        assert sigmoid.max_abs > tanh.max_abs > keep.max_abs
        assert keep.max_abs < 1e-4
    assert rows[("keep", "onnx")].graph == "Gelu×2"
    assert "Erf×2" in rows[("keep", "trt8.6")].graph
    assert "Sigmoid×2" in rows[("sigmoid", "onnx")].graph
    _check_measured([r.to_json() for r in bert_forms.rows], ITERATIONS)


def test_choose_form_follows_the_measurements(bert_forms):
    from export_gelu.check.compare_forms import choose_form

    rows = bert_forms.measured
    sigmoid_err = min(r.max_abs for r in rows if r.form == "sigmoid")
    tanh_err = max(r.max_abs for r in rows if r.form == "tanh")
    chosen, why = choose_form(bert_forms, atol=(tanh_err + sigmoid_err) / 2)
    assert chosen.form != "sigmoid" and chosen.max_abs <= tanh_err
    assert "within atol" in why
    fastest_ok = min((r for r in rows if r.max_abs <= (tanh_err + sigmoid_err) / 2),
                     key=lambda r: r.latency.median_ms)
    assert chosen is fastest_ok or chosen.latency.overlaps(fastest_ok.latency)
    chosen, why = choose_form(bert_forms, atol=1.0)  # everything qualifies
    fastest = bert_forms.fastest()
    assert chosen is fastest or chosen.latency.overlaps(fastest.latency)
    best = min(r.max_abs for r in rows)
    chosen, why = choose_form(bert_forms, atol=best / 10)
    assert chosen.max_abs == best and "no form stays within" in why


def test_gelu_auto_exports_the_chosen_form_and_says_why(saved_model, tmp_path):
    out, rep_path = tmp_path / "auto.onnx", tmp_path / "r.json"
    res = run_cli(saved_model("bert", "exported"), "--target", "onnx", "--gelu", "auto",
                  "--atol", "5e-4", "-o", out, "--iterations", str(ITERATIONS), "--warmup", "2",
                  "--report", rep_path)
    assert res.code == 0, res.err + res.out
    rep = json.loads(rep_path.read_text())
    chosen = rep["gelu_form"].split("→")[1].strip()
    assert chosen in ("keep", "erf", "tanh")  # sigmoid's error (~1e-3) is over 5e-4
    assert "gelu auto: chose" in res.out and "within atol 0.0005" in res.out
    assert rep["forms"]["choice"].startswith("gelu auto: chose")
    assert rep["parity"]["status"] == "passed" and rep["parity"]["atol"] == 5e-4
    gelus = [n for n in onnx.load(str(out)).graph.node if n.op_type == "Gelu"]
    assert len(gelus) == EXAMPLES["bert"].gelu_sites
    _check_measured(rep["forms"]["rows"], ITERATIONS)


def test_compare_forms_refuses_onnx_input_and_contradictory_flags(saved_model, golden_run,
                                                                 tmp_path):
    run = golden_run("lstm", "exported", "--target", "onnx", "--no-verify")
    onnx_path = run.copy_to(tmp_path, "b.onnx")
    res = run_cli(onnx_path, "--compare-forms")
    assert res.code == 2 and "needs the PyTorch model" in res.err
