"""Shared graphs for the quantization tests: the bundled examples exported for a target
(built once, `session_cache`), their PyTorch modules, and feeds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.session_cache import SessionCache

VOCAB = 1000


def _export(name: str, target: str, folder: Path) -> None:
    import torch

    from examples import models
    from export_gelu import api

    module = models.build(name)
    torch.manual_seed(0)
    x = (torch.randint(0, VOCAB, (2, 16)) if name in ("bert", "gpt2")
         else torch.randn(2, 3, 32, 32))
    api.export(module, args=(x,), target=target, output=folder / "model.onnx", verify=False)


@pytest.fixture(scope="session")
def example_graph(session_cache: SessionCache) -> Callable[[str, str], onnx.ModelProto]:
    """example_graph(name, target) → the bundled example `name` exported for `target` (a
    fresh ModelProto each call; the file is built once)."""

    def get(name: str, target: str) -> onnx.ModelProto:
        folder = session_cache.folder(f"quant-{name}-{target}",
                                      lambda f: _export(name, target, f))
        return onnx.load(str(folder / "model.onnx"))

    return get


def feeds_for(model: onnx.ModelProto, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """`count` feeds for an example graph: token ids, or image-like floats."""
    rng = np.random.default_rng(seed)
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    if inp.type.tensor_type.elem_type == onnx.TensorProto.INT64:
        return [{inp.name: rng.integers(0, VOCAB, shape).astype(np.int64)} for _ in range(count)]
    return [{inp.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


def torch_runs(module, model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]
               ) -> list[dict[str, np.ndarray]]:
    """The PyTorch module on the feeds, outputs named as the graph names them."""
    import torch

    inp, out = model.graph.input[0].name, model.graph.output[0].name
    with torch.no_grad():
        return [{out: module(torch.from_numpy(f[inp])).numpy()} for f in feeds]
