"""The TorchScript exporter's graphs given the module of every node, under the keys (and in
the format) torch's dynamo exporter writes (`graph/provenance.py`).

The TorchScript exporter records where each node came from in two places: its name
(`/blocks.2/act/Mul_1`, when it traced an `nn.Module`'s submodules) and, with `verbose=True`,
its `doc_string`: the frames of the trace that made it (`model.py(41): forward`, innermost
first). export-gelu exports with the TorchScript exporter from an ExportedProgram's module,
whose generated `forward` calls no submodule, so every name is flat (`/Mul_7`): there the
frame in the generated code (`<eval_with_key>.9(35)`) names the fx node, and the fx node holds
what dynamo would have written (`nn_module_stack`, `stack_trace`). From a plain module the
names give the scopes, the module's own tree their classes, and the frames the stack trace.

`verbose=True` also switches on the exporter's log, which C++ prints to the process's stdout;
`source_frames()` keeps the doc strings and leaves the log off. The doc strings are removed
once read: the graph is what the exporter writes without them, plus the metadata.
"""

from __future__ import annotations

import contextlib
import linecache
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import onnx

from export_gelu import graph as G
from export_gelu.graph import provenance as P

if TYPE_CHECKING:
    import torch

_DOC_FRAME = re.compile(r"^(?P<path>.+)\((?P<line>\d+)\): (?P<func>\S+)$")
#: Frames that are torch's machinery around a module call, never the model's code.
_PLUMBING = re.compile(r"[\\/]torch[\\/](nn[\\/]modules[\\/]module\.py|_ops\.py|jit[\\/]|fx[\\/])")


@contextlib.contextmanager
def _log_off(verbose: bool) -> Iterator[None]:
    yield


@contextlib.contextmanager
def source_frames() -> Iterator[bool]:
    """While the TorchScript exporter runs: yields the `verbose` value to export with (True
    when its log can be kept off, so only the doc strings change; else False)."""
    try:
        from torch.onnx._internal.torchscript_exporter import utils as ts_utils

        original = ts_utils.setup_onnx_logging
    except (ImportError, AttributeError):  # another torch: no doc strings, names only
        yield False
        return
    ts_utils.setup_onnx_logging = _log_off
    try:
        yield True
    finally:
        ts_utils.setup_onnx_logging = original


def _frames(doc: str) -> list[tuple[str, int, str]]:
    """(file, line, function) of a doc string's frames, innermost first, up to the tracer."""
    out = []
    for line in doc.splitlines():
        m = _DOC_FRAME.match(line.strip())
        if not m:
            continue
        path = m["path"]
        if re.search(r"[\\/]torch[\\/]jit[\\/]_trace\.py$", path):
            break  # the tracer's own frames and its callers: not the model's
        out.append((path, int(m["line"]), m["func"]))
    return out


def _stack_trace(frames: list[tuple[str, int, str]]) -> str:
    """Frames (innermost first) as Python writes a traceback, outermost first (torch's
    `stack_trace` format), without torch's module-call machinery."""
    parts = []
    for path, line, func in reversed(frames):
        if path.startswith("<") or _PLUMBING.search(path):
            continue
        code = linecache.getline(path, line).strip()
        parts.append(f'File "{path}", line {line}, in {func}' + (f"\n    {code}" if code else ""))
    return "\n  ".join(parts)


def _qualified(cls: type) -> str:
    """A class as torch's dynamo exporter names it (`torch.nn.modules.linear.Linear`)."""
    module = getattr(cls, "__module__", None)
    return f"{module}.{cls.__qualname__}" if module and module != "builtins" else cls.__name__


class _GraphModules:
    """The fx nodes behind each line of the generated `forward` of the GraphModules traced."""

    def __init__(self, traced: torch.nn.Module) -> None:
        import torch

        self.by_file: dict[str, tuple[int, dict, list]] = {}
        for mod in traced.modules():
            if not isinstance(mod, torch.fx.GraphModule):
                continue
            code = getattr(type(mod).forward, "__code__", None)
            lines = getattr(mod, "_lineno_map", None)
            if code is not None and lines:
                self.by_file[code.co_filename] = (code.co_firstlineno, lines,
                                                  list(mod.graph.nodes))

    def node_at(self, frames: list[tuple[str, int, str]]) -> torch.fx.Node | None:
        for path, line, _ in frames:
            found = self.by_file.get(path)
            if found is not None:
                first, lines, nodes = found
                index = lines.get(line - first)
                return nodes[index] if index is not None and index < len(nodes) else None
        return None


def _fx_props(fx_node: torch.fx.Node) -> list[onnx.StringStringEntryProto] | None:
    """What torch's dynamo exporter writes for this fx node (`_set_node_metadata`)."""
    stack = fx_node.meta.get("nn_module_stack")
    if not stack:
        return None
    scopes = [name for name, _ in stack.values()]
    classes = [c if isinstance(c, str) else _qualified(c) for _, c in stack.values()]
    return P.scope_props(scopes, classes, (fx_node.name, str(fx_node.target)),
                         fx_node.meta.get("stack_trace") or "")


def _name_props(node: onnx.NodeProto, modules: dict[str, str],
                frames: list[tuple[str, int, str]]) -> list[onnx.StringStringEntryProto] | None:
    """From a TorchScript node name of a traced module (`/blocks.2/act/Mul_1`)."""
    scopes = P.scopes_from_name(node.name)
    if scopes is None:
        if not (node.name.startswith("/") and frames):
            return None
        scopes = [""]  # an op of the model's own forward
    classes = [modules.get(s, "") for s in scopes]
    leaf = node.name.rsplit("/", 1)[-1] or node.op_type
    return P.scope_props(scopes, classes, (leaf, node.op_type), _stack_trace(frames))


def record_scopes(model: onnx.ModelProto, traced: torch.nn.Module) -> None:
    """Write torch's metadata keys on the nodes of `model`, just exported by the TorchScript
    exporter from `traced`, and clear the doc strings read; nodes the exporter left without
    either (its own Identity or folded Constant nodes) take them from their neighbours."""
    fx = _GraphModules(traced)
    modules = {name: _qualified(type(m)) for name, m in traced.named_modules()}
    for node in G.all_node_protos(model.graph):
        if P.has_provenance(node):
            continue
        frames = _frames(node.doc_string)
        fx_node = fx.node_at(frames)
        props = _fx_props(fx_node) if fx_node is not None else None
        if props is None and not fx.by_file:
            props = _name_props(node, modules, frames)
        if props is not None:
            node.metadata_props.extend(props)
        node.ClearField("doc_string")
