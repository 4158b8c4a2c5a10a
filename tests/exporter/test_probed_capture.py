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
from export_gelu.exporter.hf.dim_probe import capture_keeping_all
from export_gelu.exporter.hf.graph_spec import GraphDim, GraphSpec
from export_gelu.exporter.hf.graphs import _probed_at
from export_gelu.exporter.hf.probed_capture import ProbedCapture, shapes_key
from export_gelu.flags.dynamic import DimRange
from export_gelu.results.request import OneGraphSource
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


def test_a_one_graph_folder_at_another_precision_captures_again(bert_folder: Path,
                                                                 tmp_path: Path) -> None:
    """A one-graph task's probe runs its program at the dims' sizes: it stays at fp32 (a
    missing fp16 CPU kernel there would keep a dim static), so fp16 captures again."""
    inputs = export_inputs_of(export_request(bert_folder, tmp_path, precision="fp16"))
    probed = inputs.loaded.probed
    assert probed is not None and probed.precision == "fp32"
    log = StepLog()
    captured = capture(inputs, "fp16", Run(log))
    assert captured.program is not None and captured.program is not probed.program
    assert log.steps == [CAPTURING]


class _Batch(torch.nn.Module):
    """Takes its batch dynamic at fp32; at fp16 it fixes the batch at 4 (the capture at
    batch 1..8 then fails)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float16:
            torch._check(x.shape[0] == 4)
        return self.linear(x)


def _batch_spec() -> GraphSpec:
    from collections import OrderedDict

    return GraphSpec("model.onnx", _Batch().eval(), OrderedDict(x=torch.randn(4, 3)), ["y"],
                     [GraphDim("batch", 1, 4, 8, axes=(("x", 0),))])


def test_a_generation_graph_is_probed_at_the_exports_precision() -> None:
    """fp16/bf16: the probe captures a cast copy on cast inputs, once, and hands the copy over
    with the program; the loaded module stays float32."""
    spec = _batch_spec()
    spec.module = torch.nn.Linear(3, 3)  # takes any batch at any precision
    got = _probed_at(spec, "bf16")
    assert got is not None and got.probed is not None and got.probed.precision == "bf16"
    assert got.probed.module is not spec.module
    assert got.probed.module.weight.dtype == torch.bfloat16
    assert spec.module.weight.dtype == torch.float32
    assert [t.dtype for t in got.probed.inputs] == [torch.bfloat16]
    assert got.dims == spec.dims and _probed_at(spec, "fp32") is None


def test_a_dim_the_cast_copy_refuses_leaves_the_probe_to_fp32() -> None:
    """One capture at fp16, no narrowing: where it refuses a declared dim, the fp32 probe
    decides as before (and the export then captures the cast module)."""
    spec = _batch_spec()
    assert capture_keeping_all(spec.module, spec.inputs, spec.dims) is not None  # fp32 keeps it
    assert _probed_at(spec, "fp16") is None


def test_weights_over_the_copy_limit_are_not_probed_cast(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """A cast copy held from loading to export would double the weights in memory: up to
    COPY_LIMIT_BYTES only (Linear(3, 3): 48 bytes)."""
    from export_gelu.exporter.saving import weight_size

    spec = _batch_spec()
    spec.module = torch.nn.Linear(3, 3)
    monkeypatch.setattr(weight_size, "COPY_LIMIT_BYTES", 47)
    assert _probed_at(spec, "fp16") is None
    monkeypatch.setattr(weight_size, "COPY_LIMIT_BYTES", 48)
    assert _probed_at(spec, "fp16") is not None


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


def test_a_decoder_with_past_at_fp16_is_captured_once(tmp_path: Path) -> None:
    """At --precision fp16 the probe's cast copy is what the export captures from: the
    capture step takes the probe's program (no torch.export of its own)."""
    from export_gelu.steps.inputs import export_inputs
    from export_gelu.steps.load import load
    from tests.hf_folders import save_folder

    folder = save_folder("gpt2", tmp_path / "gpt2")
    request = export_request(folder, tmp_path, precision="fp16")
    source = load(request, Run())  # as the export loads it: probed at the run's precision
    assert isinstance(source, OneGraphSource)
    inputs = export_inputs(source, request, Run())
    probed = inputs.loaded.probed
    assert probed is not None and probed.precision == "fp16"
    log = StepLog()
    captured = capture(inputs, "fp16", Run(log))
    assert captured.program is probed.program and captured.module is probed.module
    assert log.steps == [USING_PROBED]
    assert next(inputs.loaded.module.parameters()).dtype == torch.float32  # the reference
