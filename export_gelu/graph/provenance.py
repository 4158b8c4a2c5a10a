"""Where a node came from: the PyTorch module and source line an exporter recorded for it.

torch's dynamo exporter writes, on each node, `pkg.torch.onnx.name_scopes` (the module paths
from the root down, then the fx node's name: `['', 'blocks.2', 'blocks.2.act', 'gelu']`) and
`pkg.torch.onnx.stack_trace` (Python's traceback text of the call). The TorchScript exporter
writes the scopes into the node's name instead (`/blocks.2/act/Tanh`). Every reader of a
node's provenance goes through this module.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import onnx_graphsurgeon as gs

from export_gelu.graph.index import metadata_props

SCOPES_KEY = "pkg.torch.onnx.name_scopes"
STACK_KEY = "pkg.torch.onnx.stack_trace"
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
#: Frames inside torch itself (nn.Module's call machinery, torch.nn's own forward()s).
_TORCH_FRAME = re.compile(r"[/\\]torch[/\\]")


def _props(node: Any) -> dict[str, str]:
    """A node's metadata as a dict: a graphsurgeon node's (as imported) or a NodeProto's."""
    entries = metadata_props(node) if isinstance(node, gs.Node) else node.metadata_props
    return {p.key: p.value for p in entries}


def scopes_of(node: Any) -> list[str]:
    """The module paths `node` sits in, outermost first (`['blocks.2', 'blocks.2.act']`);
    [] when the exporter recorded none."""
    raw = _props(node).get(SCOPES_KEY)
    if raw is not None:
        try:
            scopes = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return []
        if not isinstance(scopes, list):
            return []
        return [str(s) for s in scopes[1:-1] if str(s)]  # drop the root '' and the fx node
    name = str(node.name or "")
    parts = [p for p in name.split("/")[1:-1] if p] if name.startswith("/") else []
    return [".".join(parts[:i + 1]) for i in range(len(parts))]  # TorchScript: /a/b.0/Op_1


def module_of(node: Any) -> str:
    """The innermost module path recorded for `node`, or ""."""
    scopes = scopes_of(node)
    return scopes[-1] if scopes else ""


def source_of(node: Any) -> str:
    """`file.py:LINE` of the model's own code that made `node` (the innermost frame of the
    recorded stack trace outside torch), or ""."""
    return source_in(_props(node).get(STACK_KEY, ""))


def source_in(stack_trace: str) -> str:
    """`file.py:LINE` of the innermost frame outside torch in a traceback's text, or ""."""
    frames = _FRAME.findall(stack_trace or "")
    own = [f for f in frames if not _TORCH_FRAME.search(f[0])]
    if not own:
        return ""
    path, line = own[-1]
    return f"{_basename(path)}:{line}"


def _basename(path: str) -> str:
    return re.split(r"[/\\]", path)[-1]
