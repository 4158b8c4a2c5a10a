"""The GELUs a model's forward really calls, counted while it runs
(tests/exporter/test_hf_folders.py compares them with the sites export-gelu finds); the folders
are examples/hf_folders.py's."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import torch

from examples.hf_folders import MODELS, MORE_MODELS, build, save_folder

__all__ = ["MODELS", "MORE_MODELS", "build", "save_folder", "counting_gelus"]

# -- the GELUs a forward calls -----------------------------------------------------------------

#: Activation classes that compute the tanh form (Bloom's writes it by hand).
_TANH_CLASSES = ("newgelu", "fastgelu", "gelutanh", "pytorchgelutanh", "accurategelu",
                 "bloomgelu")


def _kind_of_class(name: str) -> str | None:
    low = name.lower()
    if "quickgelu" in low:
        return "quick"
    if any(c in low for c in _TANH_CLASSES):
        return "tanh"
    if "gelu" in low:
        return "exact"
    return None


class _GeluCalls(torch.overrides.TorchFunctionMode):
    """F.gelu calls made outside a GELU activation module (those count as the module)."""

    def __init__(self, counts: Counter, depth: list[int]) -> None:
        super().__init__()
        self.counts, self.depth = counts, depth

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if func is torch.nn.functional.gelu and not self.depth[0]:
            tanh = kwargs.get("approximate", args[1] if len(args) > 1 else "none") == "tanh"
            self.counts["tanh" if tanh else "exact"] += 1
        return func(*args, **kwargs)


@contextlib.contextmanager
def counting_gelus(model: torch.nn.Module) -> Iterator[Counter]:
    """Counts each GELU the model computes while inside, by kind (exact, tanh, quick)."""
    counts: Counter = Counter()
    depth = [0]
    handles = []
    for module in model.modules():
        kind = _kind_of_class(type(module).__name__)
        if kind is None:
            continue

        def pre(_m, _a, kind=kind):  # noqa: ANN001
            if not depth[0]:
                counts[kind] += 1
            depth[0] += 1

        def post(_m, _a, _o):  # noqa: ANN001
            depth[0] -= 1

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        with _GeluCalls(counts, depth):
            yield counts
    finally:
        for h in handles:
            h.remove()
