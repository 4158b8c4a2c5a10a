"""exporter/hf/probed_capture.py: a folder graph is captured once. The dim probe's program is
what the capture step takes when it would make the same torch.export call; any other call
(another module, other values, other dims) captures again."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from export_gelu.exporter.capture.capture import CAPTURING, USING_PROBED
from export_gelu.exporter.capture.dynamic_capture import auto_axes, dynamic_shapes, export_dynamic
from export_gelu.exporter.feeds.dynamic_plan import DynamicPlan
from export_gelu.exporter.hf.probed_capture import ProbedCapture, shapes_key
from export_gelu.flags.dynamic import DimRange
from export_gelu.run import Run
from export_gelu.steps.torch_graph import capture
from tests.flows.step_log import StepLog
from tests.steps.step_inputs import export_inputs_of, export_request

pytest.importorskip("transformers")


class _Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _probed(module: torch.nn.Module, x: torch.Tensor, shapes: tuple) -> ProbedCapture:
    program = torch.export.export(module, (x,), dynamic_shapes=shapes, strict=False)
    return ProbedCapture(program, module, (x,), shapes_key(shapes))


def test_fits_only_the_same_call() -> None:
    module, x = _Scale(), torch.arange(12.0).reshape(3, 4)
    batch = torch.export.Dim("batch", min=1, max=8)
    probed = _probed(module, x, ({0: batch},))
    assert probed.fits(module, (x.clone(),), ({0: torch.export.Dim("batch", min=1, max=8)},))
    assert not probed.fits(_Scale(), (x,), ({0: batch},))  # another module
    assert not probed.fits(module, (x + 1,), ({0: batch},))  # other values
    assert not probed.fits(module, (x.double(),), ({0: batch},))  # another dtype
    assert not probed.fits(module, (x,), ({0: torch.export.Dim("batch", min=1, max=4)},))
    assert not probed.fits(module, (x,), ({0: torch.export.Dim("b", min=1, max=8)},))
    assert not probed.fits(module, (x,), ({0: torch.export.Dim.AUTO},))
    assert not probed.fits(module, (x,), None)  # static


def test_an_input_without_dims_is_the_same_as_none_or_empty() -> None:
    assert shapes_key(({0: torch.export.Dim.AUTO}, None)) == \
        shapes_key(({0: torch.export.Dim.AUTO}, {}))
    assert shapes_key(None) == ()


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.hf_folders import save_folder

    return save_folder("bert", tmp_path_factory.mktemp("probed") / "bert")


def test_a_folder_graph_is_captured_once(bert_folder: Path, tmp_path: Path) -> None:
    inputs = export_inputs_of(export_request(bert_folder, tmp_path))
    probed = inputs.loaded.probed
    assert probed is not None and inputs.dynamic.ranged  # batch and sequence, probed
    log = StepLog()
    captured = capture(inputs, "fp32", Run(log))
    assert captured.program is probed.program
    assert inputs.loaded.probed is None  # taken once: the fx passes edit the program
    assert log.steps == [USING_PROBED]  # not "capturing": no torch.export ran here


def test_another_precision_captures_again(bert_folder: Path, tmp_path: Path) -> None:
    inputs = export_inputs_of(export_request(bert_folder, tmp_path, precision="fp16"))
    probed = inputs.loaded.probed
    assert probed is not None
    log = StepLog()
    captured = capture(inputs, "fp16", Run(log))
    assert captured.program is not None and captured.program is not probed.program
    assert log.steps == [CAPTURING]


@pytest.mark.parametrize("how", ["static", "inputs given"])
def test_a_graph_without_probed_dims_has_no_program_to_hand_over(bert_folder: Path,
                                                                 how: str) -> None:
    """--static and the user's own --input sizes skip the probe: nothing probed, and the
    folder loads (the capture step then captures as for any module)."""
    from export_gelu.exporter.loading.load import load_model

    loaded = load_model(bert_folder, static=True) if how == "static" else \
        load_model(bert_folder, inputs=["input_ids:1x7:int64", "attention_mask:1x7:int64"])
    assert loaded.probed is None and loaded.module is not None and not loaded.dims


class _Cached(torch.nn.Module):
    """x's axis 0 is the ranged dim; `cache`'s axis 1 has x's example size by chance only."""

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        return x.sum() + cache.sum()


def _plan() -> DynamicPlan:
    return DynamicPlan(dims=[DimRange("seq", 1, 4, 8, (("x", 0),), "--dynamic seq=1:4:8")])


def test_a_probed_program_for_the_static_spec_skips_the_try_with_auto_axes() -> None:
    """Without a probed program the first try gives `cache`'s axis 1 (size 4, seq's OPT)
    Dim.AUTO; torch makes it a symbol of its own and it is captured again static. With the
    probe's program for that second spec at hand, the loop starts there: one call."""
    module, shapes = _Cached(), {"x": (4,), "cache": (2, 4)}
    args = (torch.ones(4), torch.ones(2, 4))
    assert auto_axes(_plan(), shapes) == {("cache", 1)}
    calls: list[tuple] = []

    def export(spec: tuple) -> torch.export.ExportedProgram:
        calls.append(shapes_key(spec))
        return torch.export.export(module, args, dynamic_shapes=spec, strict=False)

    export_dynamic(_plan(), shapes, export)
    assert [(None if c is None else [a for a, _ in c]) for c in calls[0]] == [[0], [1]]
    assert len(calls) == 2 and calls[1][1] is None  # AUTO first, then static

    calls.clear()
    static_spec = shapes_key(dynamic_shapes(_plan(), shapes, {("cache", 1)}))
    program = export_dynamic(_plan(), shapes, export, lambda s: shapes_key(s) == static_spec)
    assert calls == [static_spec] and program is not None
    calls.clear()
    export_dynamic(_plan(), shapes, export, lambda s: False)  # no probed program: as before
    assert len(calls) == 2


def test_a_decoder_with_past_is_captured_once(tmp_path: Path) -> None:
    """GPT-2's past key values' head count and head size are its dims' OPTs: the probe's
    program (those axes static) is what the capture step takes, without a try before it."""
    from tests.hf_folders import save_folder

    folder = save_folder("gpt2", tmp_path / "gpt2")
    inputs = export_inputs_of(export_request(folder, tmp_path))
    probed = inputs.loaded.probed
    assert probed is not None
    sizes = {n: tuple(a.shape) for n, a in inputs.feed.items()}
    assert auto_axes(inputs.dynamic, sizes)  # the axes the first try gave Dim.AUTO
    calls = []
    real = torch.export.export

    def counted(*args: object, **kwargs: object) -> torch.export.ExportedProgram:
        calls.append(1)
        return real(*args, **kwargs)

    torch.export.export = counted
    try:
        captured = capture(inputs, "fp32", Run())
    finally:
        torch.export.export = real
    assert captured.program is probed.program and calls == []
