"""Is the reference deterministic? Two runs of it on the same inputs, compared; when they
differ, the random ops the model calls in `forward`, with their module and source line, and
the way out (feed the random values as an input)."""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.graph.provenance import is_model_frame, source_in
from export_gelu.json_value import JsonObject
from export_gelu.tolerances import judging_for

if TYPE_CHECKING:
    from polygraphy.backend.base import BaseRunner
    from torch import fx, nn

#: aten ops that draw random numbers (dropout only counts in train mode: see `_draws`).
_RANDOM_OP = re.compile(r"^(rand|randn|randint|rand_like|randn_like|randint_like|randperm|"
                        r"bernoulli|bernoulli_|normal|normal_|uniform_|multinomial|"
                        r"exponential_|geometric_|poisson|cauchy_|log_normal_|random_|"
                        r"native_dropout|dropout|feature_dropout|alpha_dropout)$")
_DROPOUTS = {"dropout", "feature_dropout", "alpha_dropout"}


@dataclass
class RandomSite:
    """One random draw in the model's forward."""

    op: str  # aten op, e.g. aten.rand_like
    module: str  # the module that calls it ("" for the top level)
    source: str  # file:line of the call in the model's source, when known


def _draws(name: str, args: tuple[object, ...]) -> bool:
    """`aten.<name>` draws random numbers with these args (dropout: only when training)."""
    if not _RANDOM_OP.match(name):
        return False
    if name in _DROPOUTS:
        train = args[2] if len(args) > 2 else False
        p = args[1] if len(args) > 1 else 0.0
        return bool(train) and isinstance(p, (int, float)) and float(p) > 0.0
    return True


def _op_name(target: object) -> str:
    packet = getattr(target, "overloadpacket", None)
    return getattr(packet, "__name__", "") or getattr(target, "__name__", "") or str(target)


def _short(source: str | None) -> str:
    """`file.py:LINE` of a `path/to/file.py:LINE` ("" for None)."""
    return (source or "").replace("\\", "/").rsplit("/", 1)[-1]


def _source_of(stack_trace: str | None) -> str:
    """The innermost frame of the model's own code in a recorded stack trace, as
    file.py:LINE (graph/provenance.py `source_in`: torch's and this package's frames
    skipped; a library's model code, such as transformers' modeling files, is the model's)."""
    return _short(source_in(stack_trace or ""))


def sites_in_graph(module: fx.GraphModule) -> list[RandomSite]:
    """Random ops of a captured program (a torch.fx GraphModule, e.g. ExportedProgram.module()),
    their modules from the nodes' `nn_module_stack`."""
    sites = []
    for gm in module.modules():
        graph = getattr(gm, "graph", None)
        for node in getattr(graph, "nodes", []):
            if node.op != "call_function" or not _draws(_op_name(node.target), node.args):
                continue
            stack = node.meta.get("nn_module_stack") or {}
            path = list(stack.values())[-1][0] if stack else ""
            sites.append(RandomSite(f"aten.{_op_name(node.target)}", str(path),
                                    _source_of(node.meta.get("stack_trace"))))
    return sites


def _model_line(depth: int) -> str:
    """file.py:LINE of the innermost frame of the model's own code that the call made at
    stack `depth` (the runner's) led to: the line that called the random op. Only frames
    deeper than `depth` count (never the caller's: the command's entry point, a test), and of
    those not torch's, this package's, polygraphy's or Python's own; a model file inside an
    installed library (transformers' modeling_vit_mae.py) is the model's code."""
    for frame in reversed(traceback.extract_stack()[depth:]):
        if is_model_frame(frame.filename) and not _python_or_tool(frame.filename):
            return f"{_short(frame.filename)}:{frame.lineno}"
    return ""


def _python_or_tool(path: str) -> bool:
    """A frame of Python's standard library or of polygraphy (which runs the model)."""
    import sysconfig

    norm = path.replace("\\", "/")
    stdlib = sysconfig.get_paths()["stdlib"].replace("\\", "/")
    return (norm.startswith(stdlib + "/") and "-packages/" not in norm) \
        or "/polygraphy/" in norm


def _entering(stack: list[str], path: str
              ) -> Callable[[nn.Module, tuple[object, ...]], None]:
    """A forward pre-hook pushing the module's path onto `stack`."""

    def hook(_module: nn.Module, _args: tuple[object, ...]) -> None:
        stack.append(path)

    return hook


def sites_by_running(runner: BaseRunner, feed: Mapping[str, np.ndarray]) -> list[RandomSite]:
    """Random ops an eager module calls on `feed`: aten ops seen by a dispatch mode, their
    module from forward hooks, their line from the Python stack."""
    from torch.utils._python_dispatch import TorchDispatchMode

    stack: list[str] = []
    sites: list[RandomSite] = []
    depth = len(traceback.extract_stack())  # frames deeper than this one are the model's run

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func: Callable[..., object], types: object,
                               args: tuple[object, ...] = (),
                               kwargs: Mapping[str, object] | None = None) -> object:
            name = _op_name(func)
            if _draws(name, tuple(args)):
                site = RandomSite(f"aten.{name}", stack[-1] if stack else "", _model_line(depth))
                if site not in sites:
                    sites.append(site)
            return func(*args, **(kwargs or {}))

    def leave(_module: nn.Module, _args: tuple[object, ...], _out: object) -> None:
        stack.pop()

    handles = []
    try:
        for path, sub in runner.module.named_modules():
            handles.append(sub.register_forward_pre_hook(_entering(stack, path)))
            handles.append(sub.register_forward_hook(leave))
    except (AttributeError, RuntimeError):  # a ScriptModule: no hooks, ops still seen
        pass
    try:
        with runner, Watch():
            runner.infer(dict(feed), check_inputs=False)
    finally:
        for handle in handles:
            handle.remove()
    return sites


def random_sites(runner: BaseRunner, feed: Mapping[str, np.ndarray]) -> list[RandomSite]:
    """Where the reference `runner` (a TorchRunner) draws random numbers; [] when it is not a
    PyTorch module or nothing was found."""
    import torch

    module = getattr(runner, "module", None)
    if not isinstance(module, torch.nn.Module):
        return []
    if isinstance(module, torch.fx.GraphModule):
        found = sites_in_graph(module)
        if found:
            return found
    try:
        return sites_by_running(runner, feed)
    except Exception:  # noqa: BLE001 - naming the op is a courtesy; the verdict stands
        return []


def self_difference(first: Mapping[str, np.ndarray], second: Mapping[str, np.ndarray],
                    atol: float, rtol: float) -> tuple[str, float] | None:
    """(output, max abs) of the output on which two runs of the reference differ the most
    beyond a tenth of the atol it is judged with; None when they agree."""
    worst: tuple[str, float] | None = None
    for name, a in first.items():
        if name not in second:
            continue
        x, y = np.asarray(a, np.float64), np.asarray(second[name], np.float64)
        if x.shape != y.shape:
            return name, float("inf")
        if x.size == 0:
            continue
        d = float(np.nanmax(np.abs(x - y))) if np.isfinite(x).any() else 0.0
        allowed = 0.1 * judging_for(atol, rtol, float(np.abs(x).max())).atol
        if d > allowed and (worst is None or d > worst[1]):
            worst = (name, d)
    return worst


def nondeterminism_verdict(reference_name: str, output: str, max_abs: float,
                           sites: list[RandomSite]) -> tuple[str, JsonObject]:
    """The failure reason and the report block of a reference that differs from itself."""
    if sites:
        where = "; ".join(f"{s.op} in {s.module or 'the top-level module'}"
                          + (f" ({s.source})" if s.source else "") for s in sites[:3])
        way_out = ("pass the random values as an input instead of drawing them in forward "
                   "(e.g. a `noise` argument, as ViTMAE takes), or call model.eval() for "
                   "dropout, then verify again")
    else:
        where = "no random op found (a nondeterministic kernel, or state kept across calls)"
        way_out = ("make forward deterministic (feed random values as an input, e.g. `noise`; "
                   "torch.use_deterministic_algorithms(True)), then verify again")
    reason = (f"nondeterministic model: two runs of {reference_name} on the same inputs differ "
              f"(max abs {max_abs:.3g} on {output}), so no graph can match it; random op: "
              f"{where}; {way_out}")
    block: JsonObject = {"output": output, "max_abs": max_abs,
                         "random_ops": [asdict(s) for s in sites], "way_out": way_out}
    return reason, block
