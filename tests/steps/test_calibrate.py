"""steps/calibrate.py: where each GELU site's inputs lie, on the feeds a command ran."""

from __future__ import annotations

from pathlib import Path

from export_gelu.exporter.loading.load import load_model
from export_gelu.run import Run
from export_gelu.steps.calibrate import calibrate
from tests.steps.step_inputs import main_feed


def test_calibrate_records_ranges_and_says_whose_data(program: Path) -> None:
    run = Run()
    cal = calibrate(load_model(program), [main_feed(1)], "real data from batch.npz", True, run)
    assert cal.inputs == "real data from batch.npz"
    (site,) = cal.sites
    assert site.module == "act" and site.kind == "tanh" and site.min < 0 < site.max
    made = calibrate(load_model(program), [main_feed(1)], "made here", False)
    assert made.inputs == "made here; not real data, ranges are indicative"
