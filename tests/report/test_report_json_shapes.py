"""The report writes each record it holds from the record's type (report/json_shape.py,
report/shapes.py), never from its hand-written `to_json`: where a record has one, both give
the same JSON, so a key added to one and not the other fails here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from export_gelu.check.calibration import Calibration, SiteRange
from export_gelu.check.compare_forms import FormRow, FormsComparison
from export_gelu.check.greedy_decode import DecodeResult
from export_gelu.check.latency import summarize
from export_gelu.check.localize.divergence import FirstDivergence, Localization, ModuleError
from export_gelu.check.localize.ties import TieSite
from export_gelu.check.runners.devices import DeviceChoice
from export_gelu.check.verdict.parity import OutputError, ParityResult
from export_gelu.device.choice import DeviceFormRow, DeviceForms
from export_gelu.onnx_weights import WrittenWeights
from export_gelu.passes.compat.precision.fp16_islands import Island
from export_gelu.passes.sites import GeluSite
from export_gelu.report.json_shape import as_json
from export_gelu.report.report import Report  # noqa: F401 - registers the shapes

LATENCY = summarize([0.001 + 1e-5 * i for i in range(40)], 2, "wall")
ERROR = OutputError(1e-6, 1e-4, 1e-7, 9e-7, 3.2, True, elements=64)


def _records() -> dict[str, object]:
    row = FormRow("keep", "onnx", same_as=["erf"], graph="Gelu×2", layout="fused", opset=20,
                  exporter="dynamo", max_abs=1e-6, mean_abs=1e-7, outputs={"y": ERROR},
                  latency=LATENCY, ratio=1.0, path="/tmp/x.onnx")
    device_row = DeviceFormRow("tanh", built=True, passed=True, max_abs=2e-6,
                               latency=LATENCY, rounds=2, dropped=1, chosen=True)
    return {
        "parity": ParityResult("failed", "y: max abs 0.2", 1e-4, 1e-3, ["pytorch", "ort"],
                               {"y": ERROR}, 1, error_samples={"y": np.zeros(3)},
                               nondeterministic={"runs": 2},
                               islands=[Island("t", "n", "Pow", 7e4, ["a"])]),
        "output_error": ERROR,
        "latency": LATENCY,
        "gelu_site": GeluSite("act", "tanh", "nn.GELU", "kept", "act", "fx", 0.0, ["n"], ["m"]),
        "calibration": Calibration("made here", [SiteRange(
            "act", "tanh", "act", 10, -1.0, 2.0, 0.1, 0.5, 0.0, 0.0, 1e-4, 1e-2,
            samples=np.ones(4, np.float32))]),
        "forms": FormsComparison("m.pt", "onnxruntime (CPU EP)", 1, 2, [row], LATENCY,
                                 ["a note"], "chose keep"),
        "device_forms": DeviceForms("tensorrt 8.6 (device)", 1e-4, 1e-3,
                                    [device_row, DeviceFormRow("plugin", build_error="[E]")],
                                    "chose tanh", ["n"]),
        "localization": Localization(FirstDivergence("n", "MatMul", "t", "fc", "m.py:3", 0.2,
                                                     1e-4),
                                     [ModuleError("fc", "t", 0, 0.2, 3.0, False)],
                                     ties=[TieSite("k", "TopK", "m", "", 3, 1, 2, 2, 7)],
                                     tie_cause=True),
        "decode": DecodeResult("passed", reference=[1, 2], deployed=[1, 2]),
        "weights": WrittenWeights(3, 1024, 2, "ab", 0.123456),
        "device": DeviceChoice("cpu", None, "cpu: no GPU"),
        "tie": TieSite("k", "TopK", "m", "", 3, 1, 2, 2, 7),
    }


@pytest.mark.parametrize("name", sorted(_records()))
def test_a_records_json_is_its_own_to_json(name: str) -> None:
    record = _records()[name]
    own = getattr(record, "to_json", None)  # (an OutputError is written as asdict)
    assert as_json(record) == (own() if own else dataclasses.asdict(record))  # type: ignore[call-overload]


def test_paths_and_notes_are_written_as_json() -> None:
    from export_gelu.notes import Note

    assert as_json([Path("/a/b"), Note("m", "c")]) == ["/a/b", {"code": "c", "message": "m"}]
