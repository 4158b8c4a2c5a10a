"""A reference run once and replayed: verify a big model with one model in memory at a time.

`record_reference` runs the reference (PyTorch, or ONNX Runtime on an ONNX input) on every
feed, keeps its outputs (and, when asked, its latency, timed then), and drops it; the
`RecordedRunner` it returns answers polygraphy's Comparator with those outputs, so the
deployed graph is loaded only after the reference's weights are gone (docs/big-models.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from polygraphy.backend.base import BaseRunner
from polygraphy.common import TensorMetadata

if TYPE_CHECKING:
    from export_gelu.check.latency import Latency
    from export_gelu.check.verdict.nondeterminism import RandomSite

IN_TURN_NOTE = ("big model: {reference} ran first and was freed before {output} was loaded "
                "(one model in memory at a time); latency timed in turn, not interleaved")


def fits_beside_reference(onnx_path: Path) -> bool:
    """Whether the ONNX file `onnx_path` is small (its weights under the external-data
    threshold): a bigger one is loaded only after the reference ran and was freed, so the
    weights are held once whatever memory is free."""
    from export_gelu.exporter.loading.onnx_checks import check_external_data
    from export_gelu.exporter.saving.save import external_data_threshold
    from export_gelu.exporter.saving.weight_size import file_bytes

    size = file_bytes([Path(onnx_path), *check_external_data(Path(onnx_path))])
    return size <= external_data_threshold()


class RecordedRunner(BaseRunner):
    """Replays outputs recorded from another runner for the feeds it was run on."""

    def __init__(self, name: str, feeds: Sequence[Mapping[str, np.ndarray]],
                 outputs: Sequence[OrderedDict[str, np.ndarray]], metadata: TensorMetadata,
                 latency: Latency | None = None, *,
                 again: Mapping[str, np.ndarray] | None = None,
                 random_sites: list[RandomSite] | None = None) -> None:
        super().__init__(name=name, prefix="recorded-runner")
        #: a second run on feeds[0] (check/verdict/nondeterminism.py), and the random ops found when
        #: the two differed, taken while the model was loaded
        self.again = dict(again) if again is not None else None
        self.random_sites = list(random_sites or [])
        self.feeds = [dict(f) for f in feeds]
        self.outputs = list(outputs)
        self.metadata = metadata
        self.latency = latency  # runtime.latency.Latency timed while it was live, or None

    def get_input_metadata_impl(self) -> TensorMetadata:
        return self.metadata

    def activate_impl(self) -> None:
        pass

    def deactivate_impl(self) -> None:
        pass

    def infer_impl(self, feed_dict: dict[str, np.ndarray]) -> OrderedDict[str, np.ndarray]:
        self.inference_time = 0.0  # nothing runs: the outputs were computed before
        for feed, out in zip(self.feeds, self.outputs):
            if feed.keys() == feed_dict.keys() and all(
                    np.shape(feed_dict[k]) == np.shape(v) and np.array_equal(feed_dict[k], v)
                    for k, v in feed.items()):
                return OrderedDict((k, v.copy()) for k, v in out.items())
        raise RuntimeError(f"{self.name}: outputs were recorded for {len(self.feeds)} feed(s), "
                           "not for this one (a bug in export-gelu; please report it)")


def record_reference(runner: BaseRunner, feeds: Sequence[Mapping[str, np.ndarray]],
                     iterations: int = 0, warmup: int = 0) -> RecordedRunner:
    """Run `runner` on every feed (and time it `iterations` times on the first) while it is
    active; return its recorded outputs. The caller drops `runner` (and what holds its
    model) afterwards so its memory is freed."""
    from export_gelu.check.latency import measure_latency
    from export_gelu.check.runners.torch_runner import dtype_metadata

    latency = None
    with runner:
        outputs = [OrderedDict((k, np.array(v, copy=True))
                               for k, v in runner.infer(f, check_inputs=False).items())
                   for f in feeds]
        again = OrderedDict((k, np.array(v, copy=True))
                            for k, v in runner.infer(feeds[0], check_inputs=False).items())
        if iterations > 0:
            latency = measure_latency([runner], feeds[0], iterations, warmup)[runner.name]
    sites = []
    if any(k not in again or not np.array_equal(v, again[k], equal_nan=v.dtype.kind == "f")
           for k, v in outputs[0].items()):
        from export_gelu.check.verdict.nondeterminism import random_sites

        sites = random_sites(runner, feeds[0])  # while the model is still there
    return RecordedRunner(runner.name, feeds, outputs, dtype_metadata(dict(feeds[0])), latency,
                          again=again, random_sites=sites)
