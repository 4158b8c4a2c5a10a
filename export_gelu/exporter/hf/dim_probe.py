"""Which of a folder graph's dynamic-by-default dims torch.export can keep symbolic: tried, not
assumed, as image sizes are (hf/sizes.py).

A one-graph task is dynamic by default (batch, sequence, image and audio sizes). Some models
cannot take a dim symbolic: Funnel pools the sequence to a size it computes in Python, RT-DETR
builds anchors for one batch, Longformer pads the sequence to its attention window through a
data-dependent branch. Rather than refuse the folder with torch's advice (`mark_dynamic`,
`Dim.DYNAMIC`), the graph's module is captured with every declared dim symbolic; a dim torch
refuses is kept at the example's size, or narrowed to the range torch suggests when that range
holds the example's size, and a note (`static-dim`) quotes why and says that `--dynamic`
forces a range. A one-graph task's captured program is then run at the sizes parity will
check (MIN, an odd size, MAX), so a dim the capture keeps but the graph cannot take is kept
static too (a generation graph's dims are captured only: decoding runs them).
"""

from __future__ import annotations

import dataclasses
import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from export_gelu.exporter.hf.probed_capture import ProbedCapture, shapes_key
from export_gelu.notes import Note

if TYPE_CHECKING:
    import torch

    from export_gelu.exporter.hf.graph_spec import GraphDim
    from export_gelu.exporter.torch_values import AxisDims, TensorFeed

_VIOLATED = re.compile(r"Constraints violated \(([^)]*)\)")
_FIX = re.compile(r"^\s*(\w+) = (.+)$", re.M)
_RANGE = re.compile(r"Dim\('\w+'(?:, min=(\d+))?(?:, max=(\d+))?\)")


_SPECIALIZED = re.compile(r"specialized it to be a constant \((\d+)\)")
#: torch's advice for its own API (mark_dynamic, Dim.DYNAMIC …), cut from what we quote:
#: the way out here is --dynamic (or --static).
_ADVICE = re.compile(r"\s*(If you're using|For more information|You can suppress).*$")


def torch_refusal(exc: BaseException) -> str:
    """torch's reason in one line, without its advice for its own API or the bare
    'Constraints violated' header (the line after it says which constraint)."""
    text = str(exc)
    found = _SPECIALIZED.search(text)
    if found:
        return f"the model's code makes it the constant {found[1]}"
    for line in text.strip().splitlines():
        line = _ADVICE.sub("", line.strip(" -"))
        if line and not line.startswith("Constraints violated"):
            return f"{type(exc).__name__}: {line[:200]}"
    return type(exc).__name__


def _odd_between(lo: int, hi: int) -> int:
    mid = (lo + hi) // 2 | 1
    return mid if lo < mid < hi else hi


def _torch_shapes(dims: Sequence[GraphDim], names: Sequence[str]) -> tuple[AxisDims, ...]:
    import torch

    shapes: list[dict[int, object]] = [{} for _ in names]
    index = {n: i for i, n in enumerate(names)}
    for d in dims:
        sym: object = torch.export.Dim.AUTO if d.derived else \
            torch.export.Dim(d.name, min=d.min, max=d.max)
        for name, axis in d.axes:
            if name in index:
                shapes[index[name]][axis] = sym
    return tuple(s or None for s in shapes)


def _resized(inputs: TensorFeed, dims: Sequence[GraphDim], size: dict[str, int]
             ) -> TensorFeed:
    """`inputs` with each dim's axes at `size[dim]`: the example's values tiled (ids stay in
    the vocabulary, masks keep their pattern) and cut to length."""
    axes = {key: size[d.name] for d in dims for key in d.axes}
    out: TensorFeed = OrderedDict()
    for name, tensor in inputs.items():
        t = tensor
        for axis in range(t.dim()):
            want = axes.get((name, axis))
            if want is None:
                continue
            have = int(t.shape[axis])
            if want > have:
                reps = [1] * t.dim()
                reps[axis] = -(-want // have)
                t = t.repeat(*reps)
            t = t.narrow(axis, 0, want)
        out[name] = t.contiguous()
    return out


def _capture(module: torch.nn.Module, inputs: TensorFeed, dims: Sequence[GraphDim]
             ) -> torch.export.ExportedProgram:
    import torch

    from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter

    with quiet_exporter(), torch.no_grad():
        return torch.export.export(module, tuple(inputs.values()),
                                   dynamic_shapes=_torch_shapes(dims, list(inputs)),
                                   strict=False)


def _runs(program: torch.export.ExportedProgram, inputs: TensorFeed,
          dims: Sequence[GraphDim]) -> str:
    """"" when the captured program runs at every dim's MIN, an odd size and MAX (together),
    else why not."""
    import torch

    if any(d.derived or not d.checked for d in dims):  # a generation graph's dims: ranged for
        return ""  # the TensorRT profile, run where decoding takes them (its own check)
    captured = program.module()
    for point in ("min", "odd", "max"):
        size = {d.name: d.min if point == "min" else d.max if point == "max"
                else _odd_between(d.opt, d.max) for d in dims}
        try:
            with torch.no_grad():
                captured(*_resized(inputs, dims, size).values())
        except Exception as exc:  # noqa: BLE001 - the graph baked a size in
            text = ", ".join(f"{k}={v}" for k, v in size.items())
            return f"its captured graph does not run at {text} ({torch_refusal(exc)})"
    return ""


def _attempt(module: torch.nn.Module, inputs: TensorFeed, dims: Sequence[GraphDim]
             ) -> tuple[str, str, ProbedCapture | None]:
    """("", "", the capture) when `dims` capture and run; else (why, torch's whole message,
    None)."""
    try:
        program = _capture(module, inputs, dims)
    except Exception as exc:  # noqa: BLE001 - refused or specialized: try fewer dims
        return f"torch.export cannot keep it symbolic ({torch_refusal(exc)})", str(exc), None
    why = _runs(program, inputs, dims)
    if why:
        return why, "", None
    names = list(inputs)
    return "", "", ProbedCapture(program, module, tuple(inputs.values()),
                                 shapes_key(_torch_shapes(dims, names)))


def capture_keeping_all(module: torch.nn.Module, inputs: TensorFeed, dims: Sequence[GraphDim]
                        ) -> ProbedCapture | None:
    """The program of one capture of `module` with every one of `dims` kept symbolic (and run
    at their sizes, as capturable_dims runs a one-graph task's), or None where torch refuses
    any: no narrowing, no retries."""
    return _attempt(module, inputs, dims)[2]


def _suggested(error: str, dim: GraphDim) -> tuple[int, int] | None:
    """The narrower range torch suggests for `dim` that still holds its example size."""
    for name, fix in _FIX.findall(error):
        found = _RANGE.fullmatch(fix.strip()) if name == dim.name else None
        if found:
            low, high = int(found[1] or dim.min), int(found[2] or dim.max)
            if low <= dim.opt <= high and low < high and (low, high) != (dim.min, dim.max):
                return low, high
    return None


def _guarded(error: str, dim: GraphDim) -> bool:
    """torch could not prove a guard over the declared range (TrOCR's positions: "Not all
    values of past … satisfy the generated guard min(8 + 8*s, 32 + 32*s) == …") rather than
    fixing the dim: it may still keep the dim symbolic when it chooses the range itself."""
    return bool(re.search(rf"Not all values of {re.escape(dim.name)} = .* satisfy the "
                          r"generated guard", error)) and not _SPECIALIZED.search(error)


def _note(dim: GraphDim, why: str) -> Note:
    return Note(f"{dim.name} kept static at {dim.opt}: the model cannot take it dynamic "
                f"({why}); --dynamic {dim.name}=MIN:OPT:MAX forces a range", "static-dim")


def capturable_dims(module: torch.nn.Module, inputs: TensorFeed, dims: Sequence[GraphDim]
                    ) -> tuple[list[GraphDim], list[Note], ProbedCapture | None]:
    """The dims of `dims` (hf/graph_spec.py: GraphDim, each with name, min, opt, max, axes) that
    `module` can be captured and run with, on its example `inputs`; every other one kept at
    its example size (or narrowed to torch's range), with a note saying why; and the program
    captured with the dims kept (hf/probed_capture.py), when the last capture tried kept them
    all."""
    kept, notes = list(dims), []
    probed = None
    for _ in range(len(dims) + 1):
        if not kept:
            break
        why, error, probed = _attempt(module, inputs, kept)
        if not why:
            break
        violated = _VIOLATED.search(error)
        named = [d for d in kept if violated and d.name in
                 [n.strip() for n in violated.group(1).split(",")]]
        if named:
            for d in named:
                narrower = _suggested(error, d)
                if _guarded(error, d) and not d.derived and narrower is None:
                    kept[kept.index(d)] = dataclasses.replace(d, derived=True)
                    notes.append(Note(f"{d.name}: torch.export cannot prove the model's "
                                      f"guards over {d.min}..{d.max}; the range is left to "
                                      "torch (Dim.AUTO), checked where the graph runs",
                                      "auto-dim"))
                elif narrower:
                    kept[kept.index(d)] = dataclasses.replace(d, min=narrower[0],
                                                              max=narrower[1])
                    notes.append(Note(f"{d.name} narrowed to {narrower[0]}..{narrower[1]} "
                                      "(the range torch.export can keep symbolic)",
                                      "narrowed-dim"))
                else:
                    kept.remove(d)
                    notes.append(_note(d, why))
            continue
        culprit = _one_culprit(module, inputs, kept)
        dropped = [culprit] if culprit is not None else list(kept)
        for d in dropped:
            kept.remove(d)
            notes.append(_note(d, why))
        if culprit is None:
            break
    return kept, notes, probed  # (None unless the last capture tried succeeded)


def _one_culprit(module: torch.nn.Module, inputs: TensorFeed, dims: list[GraphDim]
                 ) -> GraphDim | None:
    """The one dim (last declared first: sizes and sequence before batch) without which the
    rest capture and run; None when no single one will do."""
    for d in reversed(dims):
        rest = [x for x in dims if x is not d]
        if not rest or not _attempt(module, inputs, rest)[0]:
            return d
    return None
