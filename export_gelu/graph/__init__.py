"""The one graph: onnx-graphsurgeon's `gs.Graph`, for every ONNX pass, recogniser and check.

`load(model)` imports a `ModelProto` with graphsurgeon's importer; `save(graph, model)` writes
the graph back into that same `ModelProto`, in place, keeping what graphsurgeon's exporter
would drop or reorder (`proto.py`). Around those two, what every pass shares, written once:

    index.py    the subgraph walk (`graphs`, `walk`); producers and consumers (graphsurgeon's
                own tensor ↔ node links; a subgraph's read of an outer tensor is a user)
    values.py   constants: initializers and `Constant` nodes, read on demand; weights left
                in their external-data file stay references
    types.py    the one type inference (`infer_types`, `type_of`), cached until an edit
    edit.py     fresh names, new nodes and tensors, links changed by identity, `set_nodes`

Passes import this package as `from export_gelu import graph as G` and call `G.load`,
`G.producer`, `G.type_of`, `G.node`, … on graphsurgeon's own objects; no class here wraps
a graph. What each helper is for: docs/architecture.md, "Graph helpers".
"""

from __future__ import annotations

from export_gelu.graph.edit import (
    clone,
    constant,
    drop_unread,
    fresh_name,
    names,
    node,
    scalar,
    set_input,
    set_nodes,
    set_output,
    to_constant,
    trim_inputs,
    trim_outputs,
    unique_node_names,
    variable,
)
from export_gelu.graph.index import (
    DEFAULT_DOMAINS,
    FLOAT_TYPES,
    MAX_LITERAL_ELEMENTS,
    cached,
    consumers,
    graphs,
    is_default,
    is_output,
    is_used,
    metadata_props,
    node_named,
    opset,
    producer,
    set_opset,
    subgraphs,
    tensors,
    users,
    walk,
)
from export_gelu.graph.proto import (
    all_node_protos,
    close,
    has_subgraphs,
    load,
    node_protos,
    opened,
    opset_imports,
    save,
)
from export_gelu.graph.types import (
    TensorType,
    forget_types,
    infer_types,
    skeleton,
    type_of,
)
from export_gelu.graph.values import (
    array_of,
    attr_array,
    constant_node,
    elem_type_of,
    has_value,
    initializers,
    is_constant,
    is_weights,
    literal,
    overridable,
    proto_of,
    value,
)

__all__ = [
    "DEFAULT_DOMAINS", "FLOAT_TYPES", "MAX_LITERAL_ELEMENTS", "TensorType", "all_node_protos",
    "array_of",
    "attr_array", "cached", "clone", "close", "constant", "constant_node", "consumers",
    "drop_unread", "elem_type_of", "forget_types", "fresh_name", "graphs", "has_subgraphs",
    "has_value", "infer_types", "initializers", "is_constant", "is_default", "is_output",
    "is_used", "is_weights", "literal", "load", "metadata_props", "names", "node", "node_named",
    "node_protos", "opened", "opset", "opset_imports", "overridable", "producer", "proto_of",
    "save", "scalar", "set_input", "set_nodes", "set_opset", "set_output", "skeleton",
    "subgraphs", "tensors", "to_constant", "trim_inputs", "trim_outputs", "type_of",
    "unique_node_names", "users", "value", "variable", "walk",
]
