"""Which image and audio sizes a folder's one graph keeps dynamic: the ones the model takes.

optimum names them `height` and `width` on `pixel_values` (axes 2 and 3) and
`sequence_length` on raw audio's `input_values` (axis 1). Whether a model takes other sizes
is observed, not guessed: the model is run at the sizes parity will check (half, an odd size
between, and twice the example's), then captured with those axes symbolic (once more over
the narrower range torch.export suggests, when it needs one: a stage that would shrink to
one pixel at half the size). A model that
fails either (a position table without interpolation: ViT, BEiT; a size-dependent branch
torch.export cannot keep symbolic: Swin's window padding) keeps the example's size, and the
note says why. Mel features (`input_features`) keep theirs: Whisper takes exactly one length.
"""

from __future__ import annotations

import copy
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from export_gelu.exporter.onnx_export.to_onnx import DYNAMO_MIN_OPSET

if TYPE_CHECKING:
    import torch

    from export_gelu.exporter.torch_values import TensorFeed

#: (input, axes → optimum's dim name) of the sizes tried: images, a diffusion model's
#: latents (diffusers: `sample`, `hidden_states`), raw audio.
IMAGE = ("pixel_values", {2: "height", 3: "width"})
LATENTS = (("sample", {2: "height", 3: "width"}), ("hidden_states", {2: "height", 3: "width"}))
AUDIO = ("input_values", {1: "sequence_length"})


@dataclass(frozen=True)
class SizeDims:
    """The dims an input keeps dynamic: (name, min, opt, max, axis) rows; or why none."""

    input_name: str
    rows: tuple[tuple[str, int, int, int, int], ...] = ()
    why_static: str = ""
    #: the capture kept the batch symbolic too (False: torch refused the batch, which the
    #: dim probe then judges, hf/dim_probe.py)
    batch_kept: bool = True


def _odd_between(lo: int, hi: int) -> int:
    mid = (lo + hi) // 2 | 1
    return mid if lo < mid < hi else hi


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
    return f"{type(exc).__name__}: {text}"


def _resized(inputs: TensorFeed, name: str, axes: dict[int, int],
             batch: int = 1) -> TensorFeed:
    """`inputs` at `batch` (rows repeated), `name` made again at the sizes `axes` give."""
    import torch

    tensor = inputs[name]
    shape = [batch, *tensor.shape[1:]]
    for axis, size in axes.items():
        shape[axis] = size
    generator = torch.Generator().manual_seed(1)

    def rows(t: torch.Tensor) -> torch.Tensor:
        return t[:1].expand(batch, *t.shape[1:]).contiguous()

    out = OrderedDict((n, rows(t)) for n, t in inputs.items())
    out[name] = torch.randn(shape, generator=generator, dtype=tensor.dtype)
    return out


def _runs_at(run: Callable[[TensorFeed], object], inputs: TensorFeed,
             name: str, axes: dict[int, str], sizes: list[int],
             batches: tuple[int, ...] = ()) -> str:
    """"" when the model runs with every axis at each of `sizes` (at the batch sizes
    `batches` give, one per size; else 1), else why not."""
    import torch

    for size, batch in zip(sizes, batches or (1,) * len(sizes)):
        try:
            with torch.no_grad():
                run(_resized(inputs, name, dict.fromkeys(axes, size), batch))
        except Exception as exc:  # noqa: BLE001 - the model refuses the size: stays static
            return f"the model does not run at {size} ({_first_line(exc)})"
    return ""


def _captures(module: torch.nn.Module, inputs: TensorFeed, name: str, axes: dict[int, str],
              *, low: int, high: int, batch: tuple[int, int]) -> tuple[str, str, bool]:
    """("", "", batch kept) when torch.export keeps the axes symbolic over low..high (and
    every input's batch axis over `batch`, as the export will; when torch refuses the batch
    alone, the sizes are tried at the example's batch), else (why not, torch's whole
    message, batch kept)."""
    import torch

    from export_gelu.exporter.hf.dim_probe import torch_refusal
    from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter

    size = {a: torch.export.Dim(d, min=low, max=high) for a, d in axes.items()}
    first = torch.export.Dim("batch_size", min=batch[0], max=batch[1])
    batches: tuple[int, ...] = (batch[0], _odd_between(batch[0], batch[1]), batch[1])
    for with_batch in (True, False):  # a batch torch refuses is the dim probe's to judge
        shapes = tuple({**({0: first} if with_batch else {}),
                        **(size if n == name else {})} or None for n in inputs)
        try:
            with quiet_exporter(), torch.no_grad():
                program = torch.export.export(module, tuple(inputs.values()),
                                              dynamic_shapes=shapes, strict=False)
            break
        except Exception as exc:  # noqa: BLE001 - specialized or refused: stays static
            if with_batch and _only_batch(str(exc)):
                batches = (int(inputs[name].shape[0]),) * 3
                continue
            return (f"torch.export cannot keep it symbolic ({torch_refusal(exc)})", str(exc),
                    with_batch)
    captured = program.module()  # at the points parity will check, batch included
    why = _runs_at(lambda feed: captured(*feed.values()), inputs, name, axes,
                   [low, _odd_between(low, high), high], batches)
    return ((f"its captured graph baked the example size in ({why})" if why else ""), "",
            len(set(batches)) > 1)


def _only_batch(error: str) -> bool:
    """torch's constraint report names the batch alone (RT-DETR's anchors)."""
    found = re.search(r"Constraints violated \(([^)]*)\)", error)
    return found is not None and [n.strip() for n in found[1].split(",")] == ["batch_size"]


_SUGGESTED = re.compile(r"(\w+) = Dim\('\w+'(?:, min=(\d+))?(?:, max=(\d+))?\)")


def _narrowed(error: str, axes: dict[int, str], low: int, high: int
              ) -> tuple[int, int] | None:
    """The range torch.export suggests for the axes instead of low..high (it needs a size it
    would otherwise specialize on out: a stage that shrinks to one pixel), when it gives one
    range for all of them; else None."""
    found = {m[0]: (int(m[1] or low), int(m[2] or high)) for m in _SUGGESTED.findall(error)}
    ranges = {found.get(d) for d in axes.values()}
    if len(ranges) != 1 or None in ranges:
        return None
    return ranges.pop()


def _tried(run: Callable[[TensorFeed], object], module: torch.nn.Module,
           inputs: TensorFeed, name: str, axes: dict[int, str],
           *, sizes: tuple[int, int, int], batch: tuple[int, int]) -> tuple[str, str, bool]:
    """(why the axes cannot range over sizes' low..high, torch's message, batch kept) or
    ("", "", batch kept)."""
    low, opt, high = sizes
    why = _runs_at(run, inputs, name, axes, [low, _odd_between(opt, high), high])
    return (why, "", True) if why else _captures(module, inputs, name, axes, low=low,
                                                    high=high, batch=batch)


def size_dims(model: torch.nn.Module,
              graph_module: Callable[[torch.nn.Module], torch.nn.Module], inputs: TensorFeed,
              batch: tuple[int, int], opset: int, precision: str = "fp32") -> list[SizeDims]:
    """For the image or audio input among `inputs`: its dynamic size dims, or why none.

    Tried on a copy of `model` (a run at another size may change a model: Swin shrinks its
    window for good once an image is as small as one); `graph_module(model)` is the graph's
    module (positional inputs); `batch` the batch range the export declares; `opset` the
    export's, `precision` its precision (fp16/bf16 keep sizes) (below the dynamo
    exporter's 18, sizes stay: the TorchScript exporter and the down-conversion do not keep
    the size arithmetic symbolic on Swin and wav2vec2)."""
    out: list[SizeDims] = []
    for name, axes in (IMAGE, *LATENTS, AUDIO):
        tensor = inputs.get(name)
        if tensor is None or tensor.dim() != max(axes) + 1:
            continue
        if precision not in ("fp32", "fp64"):
            out.append(SizeDims(name, why_static=f"a {precision} export keeps them (they are "
                                "tried in float32 only; its capture at fp16/bf16 may guard "
                                "on a size: wav2vec2's convolution lengths)"))
        elif opset >= DYNAMO_MIN_OPSET:
            out.append(_probed(copy.deepcopy(model), graph_module, inputs, name, axes, batch))
        else:
            out.append(SizeDims(name, why_static=f"the target's opset {opset} is below "
                                f"{DYNAMO_MIN_OPSET}, where only the dynamo exporter keeps "
                                "image and audio sizes symbolic"))
    return out


def _probed(model: torch.nn.Module,
            graph_module: Callable[[torch.nn.Module], torch.nn.Module], inputs: TensorFeed,
            name: str, axes: dict[int, str], batch: tuple[int, int]) -> SizeDims:
    """The size dims of `name` on `model` (a copy, changed as it may be), or why none."""
    tensor = inputs[name]
    opt = int(tensor.shape[max(axes)])
    if any(int(tensor.shape[a]) != opt for a in axes):
        return SizeDims(name, why_static="its height and width differ")

    def run(feed: TensorFeed) -> object:
        return model(**feed)

    module = graph_module(model)
    low, high = max(1, opt // 2), 2 * opt
    why, error, kept = _tried(run, module, inputs, name, axes, sizes=(low, opt, high),
                              batch=batch)
    narrower = _narrowed(error, axes, low, high)
    if (narrower and narrower[0] <= opt <= narrower[1] and narrower[0] < narrower[1]
            and narrower != (low, high)):
        low, high = narrower
        why, _, kept = _tried(run, module, inputs, name, axes, sizes=(low, opt, high),
                              batch=batch)
    rows = () if why else tuple((d, low, opt, high, a) for a, d in axes.items())
    return SizeDims(name, rows, why, kept)
