"""Where a node came from in the PyTorch model: the module, its class and the source line.

torch's dynamo exporter records them on every node it writes, as `metadata_props` under its
own keys (torch 2.13, `torch/onnx/_internal/exporter/_core.py: _set_node_metadata`):

    namespace                        ": __main__.M/blocks.2: __main__.Block/blocks.2.act:
                                     torch.nn.modules.activation.GELU/gelu: aten.gelu.default"
    pkg.torch.onnx.name_scopes       "['', 'blocks.2', 'blocks.2.act', 'gelu']" (a list's repr)
    pkg.torch.onnx.class_hierarchy   "['__main__.M', '__main__.Block', '…GELU', 'aten.gelu…']"
    pkg.torch.onnx.stack_trace       'File "model.py", line 18, in forward\\n    x = b(x)\\n…'

Each list holds one entry per module from the model down, then the fx node (its name, its
target). export-gelu writes the same keys, in the same format, on graphs from the
TorchScript exporter (`exporter/onnx_export/scopes.py`) and keeps them through every pass
(`graph/edit.py`). This module reads them, for a graphsurgeon node or a `NodeProto`; a graph
without them (a foreign TorchScript export) is read from its node names (`/blocks.2/act/Mul_1`).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TypeAlias

import onnx
import onnx_graphsurgeon as gs

from export_gelu.graph.index import metadata_props
from export_gelu.graph.proto import all_node_protos

NAMESPACE = "namespace"
NAME_SCOPES = "pkg.torch.onnx.name_scopes"
CLASS_HIERARCHY = "pkg.torch.onnx.class_hierarchy"
STACK_TRACE = "pkg.torch.onnx.stack_trace"
#: The keys this package writes, in the order torch writes them.
KEYS = (NAMESPACE, CLASS_HIERARCHY, NAME_SCOPES, STACK_TRACE)

Node: TypeAlias = gs.Node | onnx.NodeProto


def props_of(node: Node) -> dict[str, str]:
    """The node's metadata_props as a dict (a graphsurgeon node: those it was imported with,
    or those of the node it was made `like`)."""
    entries = node.metadata_props if isinstance(node, onnx.NodeProto) else metadata_props(node)
    return {p.key: p.value for p in entries}


def has_provenance(node: Node) -> bool:
    """Whether the node records its module (under `name_scopes` or `namespace`)."""
    props = props_of(node)
    return NAME_SCOPES in props or NAMESPACE in props


#: Longer values are not parsed (a graph's metadata is input: parsing stays bounded).
MAX_VALUE_CHARS = 100_000


def _literal_list(text: str | None) -> list[str] | None:
    if not text or len(text) > MAX_VALUE_CHARS:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _namespace_parts(text: str | None) -> list[tuple[str, str]] | None:
    """`namespace` as (name, class) pairs: "name: class" entries joined by "/"."""
    if not text:
        return None
    parts = []
    for entry in text.split("/"):
        name, sep, cls = entry.partition(": ")
        if not sep:
            return None
        parts.append((name, cls))
    return parts


def _is_op_name(part: str) -> bool:
    """Whether a node-name part is an op the TorchScript exporter named (`Mul_1`, `Tanh`)."""
    base = re.sub(r"_\d+$", "", part)
    return bool(base) and base[0].isupper() and onnx.defs.has(base)


def scopes_from_name(name: str) -> list[str] | None:
    """The module scopes of a TorchScript exporter's node name, from the model down
    (`/blocks.2/act/Mul_1` → ['', 'blocks.2', 'blocks.2.act']); None when the name holds none.

    Each part is a module's name as the exporter wrote it: its attribute name, or the path
    from its parent with the numbers of a list (`layer.0`)."""
    if not name.startswith("/"):
        return None
    parts = [p for p in name.split("/")[1:-1] if p]
    while parts and _is_op_name(parts[-1]):  # export-gelu's own `<base>/<Op>` names
        parts.pop()
    if not parts:
        return None
    scopes, path = [""], ""
    for part in parts:
        path = part if not path or part.startswith(path + ".") else f"{path}.{part}"
        scopes.append(path)
    return scopes


def scopes_of(node: Node) -> list[str] | None:
    """The module scopes recorded for the node, from the model ('') down to its own module
    (the fx node's name, the last entry of torch's `name_scopes`, left out); None: none."""
    props = props_of(node)
    scopes = _literal_list(props.get(NAME_SCOPES))
    if scopes is None:
        parts = _namespace_parts(props.get(NAMESPACE))
        scopes = [n for n, _ in parts] if parts else None
    if scopes is not None:
        return scopes[:-1] if len(scopes) >= 2 else None
    return scopes_from_name(node.name)


def module_of(node: Node) -> str | None:
    """The path of the PyTorch module the node came from (`blocks.2.act`; "" for the model
    itself), or None when nothing records it."""
    scopes = scopes_of(node)
    return scopes[-1] if scopes else None


def class_of(node: Node) -> str | None:
    """The qualified class of that module (`torch.nn.modules.activation.GELU`), or None."""
    props = props_of(node)
    classes = _literal_list(props.get(CLASS_HIERARCHY))
    if classes is None:
        parts = _namespace_parts(props.get(NAMESPACE))
        classes = [c for _, c in parts] if parts else None
    return classes[-2] if classes and len(classes) >= 2 else None


def stack_trace_of(node: Node) -> str | None:
    """The stack trace torch recorded for the node (outermost frame first), or None."""
    return props_of(node).get(STACK_TRACE) or None


_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)')


@functools.cache
def _own_dirs() -> tuple[str, ...]:
    """Folders whose frames are not the model's: torch's and this package's."""
    dirs = [str(Path(__file__).resolve().parents[1])]
    spec = importlib.util.find_spec("torch")  # finds, does not import
    if spec is not None and spec.origin:
        dirs.append(str(Path(spec.origin).parent))
    return tuple(dirs)


def is_model_frame(path: str) -> bool:
    """Whether a stack frame's file is the model's source: not generated code (`<eval…>`),
    not torch's own files, not this package's."""
    if path.startswith("<") or re.search(r"[\\/](site|dist)-packages[\\/]torch[\\/]", path):
        return False
    if re.search(r"export_gelu[\\/]examples[\\/]", path):
        return True  # the bundled example models are models, shipped inside the package
    return not any(path.startswith(d + "/") or path.startswith(d + "\\") for d in _own_dirs())


def frames(stack_trace: str) -> list[tuple[str, int]]:
    """(file, line) of each frame of a stack trace in Python's format, outermost first."""
    return [(m["path"], int(m["line"])) for m in _FRAME.finditer(stack_trace)]


def source_of(node: Node) -> str | None:
    """`file:line` of the model's own code that made the node: the innermost frame of its
    stack trace in the model's source (torch's and generated frames skipped), or None."""
    return source_in(stack_trace_of(node) or "")


def source_in(trace: str) -> str | None:
    """`file:line` of the innermost frame of the model's own code in a stack trace's text
    (torch's, this package's and generated frames skipped), or None."""
    if not trace:
        return None
    found = [f for f in frames(trace) if is_model_frame(f[0])]
    if not found:
        return None
    path, line = found[-1]
    return f"{path}:{line}"


def describe(node: Node) -> dict[str, str | None]:
    """The node's name, op and what it records of its origin, as one record (for `inspect`
    and reports): `module`, `class`, `source` (`file:line`), each None when not recorded."""
    op = node.op_type if isinstance(node, onnx.NodeProto) else node.op
    return {"name": node.name, "op_type": op, "module": module_of(node),
            "class": class_of(node), "source": source_of(node)}


def scope_props(scopes: Sequence[str], classes: Sequence[str], leaf: tuple[str, str],
                stack_trace: str = "") -> list[onnx.StringStringEntryProto]:
    """The metadata_props torch's dynamo exporter writes, in its format: `scopes` and
    `classes` one per module from the model down, `leaf` the (name, target) of the op."""
    names = [*scopes, leaf[0]]
    kinds = [*classes, leaf[1]]
    values = {
        NAMESPACE: "/".join(f"{n}: {c}" for n, c in zip(names, kinds)),
        CLASS_HIERARCHY: repr(kinds),
        NAME_SCOPES: repr(names),
        STACK_TRACE: stack_trace,
    }
    return [onnx.StringStringEntryProto(key=k, value=values[k]) for k in KEYS]


def is_torch_key(key: str) -> bool:
    """Whether a metadata key is one of torch's node-provenance keys."""
    return key == NAMESPACE or key.startswith("pkg.torch.onnx.")


def torch_props(node: Node) -> list[onnx.StringStringEntryProto]:
    """The node's provenance entries (torch's keys only), to copy onto another node."""
    entries = node.metadata_props if isinstance(node, onnx.NodeProto) else metadata_props(node)
    return [onnx.StringStringEntryProto(key=p.key, value=p.value) for p in entries
            if is_torch_key(p.key)]


def fill_from_neighbours(graph: onnx.GraphProto) -> int:
    """Nodes without provenance take their neighbour's: the first reader of an output that
    has it (readers without it are filled first), else the producer of an input; subgraphs
    too. Returns how many were filled. For the nodes an exporter or converter adds on its own
    (the TorchScript exporter's `Identity` of a shared weight, a folded `Constant`)."""
    filled = 0
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                filled += fill_from_neighbours(sub)
    nodes = list(graph.node)
    readers: dict[str, list[onnx.NodeProto]] = {}
    producers: dict[str, onnx.NodeProto] = {}
    for n in nodes:
        for name in n.input:
            readers.setdefault(name, []).append(n)
        for name in n.output:
            producers[name] = n
    known = {id(n) for n in nodes if has_provenance(n)}
    missing = [n for n in nodes if id(n) not in known]
    for neighbours in (lambda n: [r for o in n.output for r in readers.get(o, ())],
                       lambda n: [producers[i] for i in n.input if i in producers]):
        progress = True
        while missing and progress:
            progress, still = False, []
            for n in missing:
                src = next((m for m in neighbours(n) if id(m) in known), None)
                if src is None:
                    still.append(n)
                    continue
                n.metadata_props.extend(torch_props(src))
                known.add(id(n))
                filled += 1
                progress = True
            missing = still
    return filled


def copy_provenance(src: onnx.GraphProto, dst: onnx.GraphProto) -> int:
    """Give the nodes of `dst` (a conversion of `src` that dropped node metadata, as
    `onnx.version_converter` does) the provenance of the node of `src` with the same name,
    else of the one that wrote the same output; the rest from their neighbours. Returns how
    many nodes of `dst` carry it after."""
    old = [n for n in all_node_protos(src) if has_provenance(n)]
    if not old:
        return 0
    by_name = {n.name: n for n in old if n.name}
    by_output = {o: n for n in old for o in n.output if o}
    count = 0
    for node in all_node_protos(dst):
        if has_provenance(node):
            count += 1
            continue
        was = by_name.get(node.name) if node.name else None
        was = was or next((by_output[o] for o in node.output if o in by_output), None)
        if was is not None:
            node.metadata_props.extend(torch_props(was))
            count += 1
    return count + fill_from_neighbours(dst)


def name_scopes_from_names(graph: onnx.GraphProto) -> int:
    """A graph no node of which records its module, whose node names are the TorchScript
    exporter's scoped names (`/blocks.2/act/Mul_1`): each such node gets torch's
    `name_scopes` key from its name (its classes are not known: no other key), the rest
    from their neighbours. Returns how many nodes got it; 0 for any other graph."""
    nodes = all_node_protos(graph)
    if any(has_provenance(n) for n in nodes):
        return 0
    count = 0
    for node in nodes:
        scopes = scopes_from_name(node.name)
        if scopes is not None:
            leaf = node.name.rsplit("/", 1)[-1]
            node.metadata_props.add(key=NAME_SCOPES, value=repr([*scopes, leaf]))
            count += 1
    return count + fill_from_neighbours(graph) if count else 0
