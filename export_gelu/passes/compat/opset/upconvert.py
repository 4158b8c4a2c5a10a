"""Bring an ONNX input up to a higher opset where the target gains from it.

What a target gains (`opset_goal`):
- its opset floor, for a file below it (the parser table's `opset_range`);
- ONNX `Gelu` (opset 20), for targets that lower GELU to it (`onnx`, `trt10`, `trt11`), when
  the graph holds GELU sites the chosen `--gelu` form writes as `Gelu`;
- `LayerNormalization` (opset 17), for targets that parse it (`onnx`, TensorRT 8.6+), when the
  graph holds LayerNorms expanded into primitives (`layernorm/fuse.py`), which are then fused.

The conversion is onnx's own version converter, then checked the way every rewrite is: the
graph before and after runs in ONNX Runtime on the same feed and the outputs must agree.
When the converter fails or the outputs differ, the graph stays at its opset and a note says
why (`--opset N` above the file's opset asks for the conversion outright: there, failing is
an unmet target, exit 3).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import numpy as np
import onnx

from export_gelu.errors import TargetUnmetError
from export_gelu.graph.provenance import copy_provenance
from export_gelu.onnx_weights import checkable
from export_gelu.parse_check import model_opset
from export_gelu.targets import TargetProfile
from export_gelu.tolerances import rewrite_tolerance

#: The opsets that bring ONNX `Gelu` and `LayerNormalization`.
GELU_OPSET = 20
LAYERNORM_OPSET = 17


def opset_floor(profile: TargetProfile) -> int:
    """The lowest opset `profile` takes (1 for runtimes other than TensorRT)."""
    if profile.runtime != "trt":
        return 1
    from export_gelu.trt_parser.ops import opset_range

    return opset_range(profile.trt_version).floor


def _gelu_sites(model: onnx.ModelProto) -> int:
    from export_gelu.passes.onnx import find_sites

    return sum(s.kind != "quick" for s in find_sites(model))


def _fuses_layernorm(model: onnx.ModelProto, profile: TargetProfile) -> int:
    """How many expanded LayerNorms `profile` would rather get fused (0: none, or no gain)."""
    from export_gelu.passes.compat.layernorm.fuse import count_layernorms

    if profile.runtime not in ("onnx", "trt") or not profile.supports("LayerNormalization") \
            or profile.opset < LAYERNORM_OPSET:
        return 0
    return count_layernorms(model)


def opset_goal(model: onnx.ModelProto, profile: TargetProfile, form: str
               ) -> tuple[int, list[str]]:
    """The opset `model` should be converted up to for `profile`, and why (empty: stay)."""
    have = model_opset(model)
    goal, why = have, []
    if have < LAYERNORM_OPSET and (n := _fuses_layernorm(model, profile)):
        goal = LAYERNORM_OPSET
        why.append(f"LayerNormalization for its {n} expanded LayerNorm(s)")
    floor = opset_floor(profile)
    if have < floor:
        goal = floor
        why.append(f"{profile.name} takes opset {floor} and up")
    wants_gelu = (profile.gelu_lowering == "onnx_gelu" and "Gelu" in profile.ops
                  and profile.opset >= GELU_OPSET and form not in ("sigmoid", "plugin"))
    if have < GELU_OPSET and wants_gelu and (n := _gelu_sites(model)):
        goal = GELU_OPSET
        why.append(f"native Gelu for its {n} GELU site(s)")
    return goal, why


def _ir_version_for(opset: int, current: int) -> int:
    from export_gelu.passes.compat.opset.downconvert import ir_version_for_opset

    return max(current, ir_version_for_opset(opset))


def _run(model: onnx.ModelProto, feed: Mapping[str, np.ndarray]
         ) -> tuple[list[np.ndarray], list[str]]:
    """ORT outputs and output names of `model` on `feed` (its session freed on return, so
    two big graphs are never held at once; weights left in their file are read from it)."""
    from export_gelu.onnx_weights import ort_source
    from export_gelu.passes.onnx.plugin_math import plugins_as_math
    from export_gelu.passes.ort_session import make_session

    if any(n.op_type == "CustomGeluPluginDynamic" for n in model.graph.node):
        model = copy.deepcopy(model)
        plugins_as_math(model)
    source, folder = ort_source(model)
    session = make_session(source, weights_folder=folder)
    names = [i.name for i in session.get_inputs()]
    outputs = session.run(None, {n: feed[n] for n in names if n in feed})
    return outputs, [o.name for o in session.get_outputs()]


def _tolerance(ref: np.ndarray) -> float:
    if ref.dtype.kind != "f":
        return 0.0
    finite = np.abs(ref[np.isfinite(ref)].astype(np.float64))
    return rewrite_tolerance(ref.dtype == np.float16, float(finite.max(initial=0.0)))


def outputs_agree(before: onnx.ModelProto, after: onnx.ModelProto,
                  feed: Mapping[str, np.ndarray]) -> tuple[float, str | None]:
    """(max abs difference, None) when ORT outputs of the two graphs agree on `feed` within
    `rewrite_tolerance` (tolerances.py); else (difference, why not)."""
    ref, out_names = _run(before, feed)
    got, _ = _run(after, feed)
    worst = 0.0
    for r, g, out in zip(ref, got, out_names):
        r, g = np.asarray(r), np.asarray(g)
        if r.shape != g.shape:
            return worst, f"output {out} changed shape {r.shape} → {g.shape}"
        if r.dtype.kind == "f" and not np.array_equal(np.isfinite(r), np.isfinite(g)):
            return worst, f"output {out} changed where it is finite"
        mask = np.isfinite(r) if r.dtype.kind == "f" else np.ones(r.shape, bool)
        diff = float(np.abs(r[mask].astype(np.float64) - g[mask].astype(np.float64))
                     .max(initial=0.0))
        worst = max(worst, diff)
        if diff > _tolerance(r):
            return worst, f"output {out} differs by {diff:.3g} (over {_tolerance(r):.3g})"
    return worst, None


def convert_up(model: onnx.ModelProto, opset: int, feed: Mapping[str, np.ndarray], why: str,
               strict: bool = False, fuse_layernorm: bool = False
               ) -> tuple[onnx.ModelProto, list[str]]:
    """`model` converted up to `opset` when that is sound, and the note saying what happened;
    with `fuse_layernorm` (opset ≥ 17), expanded LayerNorms are fused as well.

    Not sound (converter failure, outputs that differ): the model unchanged and a note, or
    TargetUnmetError when `strict`.
    """
    from onnx import version_converter


    have = model_opset(model)
    if opset <= have:
        return model, []

    def stay(reason: str) -> tuple[onnx.ModelProto, list[str]]:
        text = f"the opset-{have} input was not converted up to opset {opset} ({why}): {reason}"
        if strict:
            raise TargetUnmetError(text)
        return model, [f"{text}; it stays at opset {have}"]

    try:
        new = version_converter.convert_version(model, opset)
        copy_provenance(model.graph, new.graph)  # the converter drops node metadata
        new.ir_version = _ir_version_for(opset, model.ir_version)
        fused = 0
        if fuse_layernorm and opset >= LAYERNORM_OPSET:
            from export_gelu.passes.compat.layernorm.fuse import fuse_layernorms

            fused = fuse_layernorms(new)
        onnx.checker.check_model(checkable(new))
    except Exception as exc:  # noqa: BLE001 - the converter raises RuntimeError, ValidationError…
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return stay(f"onnx's version converter failed ({first})")
    try:
        diff, differs = outputs_agree(model, new, feed)
    except Exception as exc:  # noqa: BLE001 - ORT load/run errors of either graph
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return stay(f"ONNX Runtime could not run the graphs to compare them ({first})")
    if differs:
        return stay(f"ONNX Runtime outputs before and after differ: {differs}")
    what = f", {fused} expanded LayerNorm(s) fused into LayerNormalization" if fused else ""
    return new, [f"the opset-{have} input converted up to opset {opset} ({why}) with onnx's "
                 f"version converter{what}; ONNX Runtime outputs before and after agree (max "
                 f"abs difference {diff:.2g})"]


def convert_up_for(model: onnx.ModelProto, profile: TargetProfile, form: str,
                   feed: Mapping[str, np.ndarray]) -> tuple[onnx.ModelProto, list[str]]:
    """`model` converted up where `profile` gains from it (`opset_goal`); notes."""
    goal, why = opset_goal(model, profile, form)
    if goal <= model_opset(model):
        return model, []
    return convert_up(model, goal, feed, f"for {profile.name}: {'; '.join(why)}",
                      fuse_layernorm=_fuses_layernorm(model, profile) > 0)
