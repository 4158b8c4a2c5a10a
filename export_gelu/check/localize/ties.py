"""Ops whose result depends on the order in which exact ties are broken: TopK (torch's topk,
sort and argsort export to it), ArgMax and ArgMin. Fed values with exact ties, PyTorch and a
runtime may pick the tied elements in a different order, so the indices differ and so does
everything they select downstream, with no fault in the graph. RT-DETR with default init
scores 84 anchors identically: `torch.topk` and ONNX Runtime's TopK keep different ones.

When parity fails, the inputs of those ops are read from one ONNX Runtime run of a copy of
the graph (the same marked-outputs run the first divergence uses) and checked for ties that
decide the result: for TopK, equal values straddling its k-th place (which elements are kept)
or, when it sorts, equal values among the kept ones (their order); for ArgMax/ArgMin, the
extreme value occurring more than once. Only ops whose indices something reads are checked:
TopK's values alone do not depend on the order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.json_value import JsonObject
from export_gelu.shown import shown

if TYPE_CHECKING:
    import onnx

#: op type → index of the output that depends on tie order
TIE_ORDER_OPS = {"TopK": 1, "ArgMax": 0, "ArgMin": 0}
#: what the report says to do about it
WAY_OUT = ("verify on real inputs (--inputs FILE.npz), or with weights whose scores have no "
           "exact ties (trained ones, not a default or constant init)")


@dataclass
class TieSite:
    """One op of the graph fed exact ties that decide its result."""

    node: str
    op_type: str
    torch_module: str  # the module the node came from ("" when not recorded)
    source: str  # file.py:LINE of the model's code that called it, or ""
    tied: int  # the largest group of exactly equal values competing for its places
    places: int  # the elements it keeps per row: TopK's k, 1 for ArgMax/ArgMin
    rows: int  # rows (slices along its axis) where a tie decides the result
    of_rows: int  # rows in all
    order: int  # the node's position in the graph

    def to_json(self) -> JsonObject:
        return {"node": self.node, "op_type": self.op_type, "torch_module": self.torch_module,
                "source": self.source, "tied": self.tied, "places": self.places,
                "rows": self.rows, "of_rows": self.of_rows}

    def text(self) -> str:
        """`TopK node_TopK_3 in model.decoder (modeling_x.py:12) — 84 equal values for its
        10 places in 2 of 2 rows`."""
        where = f" in {shown(self.torch_module)}" if self.torch_module else ""
        line = f" ({shown(_short(self.source))})" if self.source else ""
        return (f"{shown(self.op_type)} {shown(self.node)}{where}{line} — {self.tied} equal "
                f"values for its {self.places} place{'s' if self.places != 1 else ''} in "
                f"{self.rows} of {self.of_rows} row{'s' if self.of_rows != 1 else ''}")


def _short(source: str) -> str:
    return source.replace("\\", "/").rsplit("/", 1)[-1]


def _rows(x: np.ndarray, axis: int) -> np.ndarray:
    """`x` with `axis` last, as rows."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    return x.reshape(-1, x.shape[-1]) if x.size else x.reshape(0, 0)


def _group_sizes(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of a sorted row and how many times each occurs."""
    values, counts = np.unique(row[~np.isnan(row)] if row.dtype.kind == "f" else row,
                               return_counts=True)
    return values, counts


def topk_ties(x: np.ndarray, k: int, axis: int = -1, largest: bool = True,
              sorted_: bool = True) -> tuple[int, int, int]:
    """(largest deciding tie group, rows with one, rows) of TopK(x, k) along `axis`: a group
    of equal values decides the result when it straddles the k-th place (which are kept) or,
    with `sorted_`, lies among the kept ones (their order)."""
    rows = _rows(x, axis)
    worst, hit = 0, 0
    for row in rows:
        ordered = np.sort(row[~np.isnan(row)] if row.dtype.kind == "f" else row)
        if largest:
            ordered = ordered[::-1]
        kept = ordered[:k]
        if kept.size == 0:
            continue
        values, counts = _group_sizes(ordered)
        deciding = 0
        for value, count in zip(values, counts):
            if count < 2:
                continue
            in_kept = int(np.count_nonzero(kept == value))
            straddles = 0 < in_kept < count
            if straddles or (sorted_ and in_kept >= 2):
                deciding = max(deciding, int(count))
        if deciding:
            hit += 1
            worst = max(worst, deciding)
    return worst, hit, len(rows)


def arg_ties(x: np.ndarray, axis: int, smallest: bool) -> tuple[int, int, int]:
    """(largest tie group at the extreme, rows with one, rows) of ArgMax/ArgMin along
    `axis`."""
    rows = _rows(x, axis)
    worst, hit = 0, 0
    for row in rows:
        finite = row[~np.isnan(row)] if row.dtype.kind == "f" else row
        if finite.size == 0:
            continue
        extreme = finite.min() if smallest else finite.max()
        count = int(np.count_nonzero(finite == extreme))
        if count >= 2:
            hit += 1
            worst = max(worst, count)
    return worst, hit, len(rows)


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _tie_nodes(model: onnx.ModelProto) -> list[tuple[int, onnx.NodeProto]]:
    """(position, node) of the top-level ops whose tie-order output something reads."""
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    found = []
    for i, node in enumerate(model.graph.node):
        out = TIE_ORDER_OPS.get(node.op_type)
        if node.domain not in ("", "ai.onnx") or out is None or len(node.output) <= out:
            continue
        if node.output[out] and node.output[out] in read:
            found.append((i, node))
    return found


def _constant_k(model: onnx.ModelProto, name: str) -> int | None:
    """TopK's K when an initializer or a Constant node holds it."""
    from onnx import numpy_helper

    for init in model.graph.initializer:
        if init.name == name:
            return int(numpy_helper.to_array(init).reshape(-1)[0])
    for node in model.graph.node:
        if node.op_type == "Constant" and list(node.output) == [name]:
            for a in node.attribute:
                if a.name == "value":
                    return int(numpy_helper.to_array(a.t).reshape(-1)[0])
    return None


def find_ties(graph_path: Path, feed: Mapping[str, np.ndarray], threads: int = 1
              ) -> list[TieSite]:
    """The tie-order ops of the graph at `graph_path` whose inputs, in one ONNX Runtime run on
    `feed`, hold exact ties that decide their result; in graph order ([] when none)."""
    import onnx

    from export_gelu.check.localize.marked_run import run_with_outputs
    from export_gelu.graph.provenance import module_of, source_of

    model = onnx.load(str(graph_path), load_external_data=False)
    nodes = _tie_nodes(model)
    if not nodes:
        return []
    inputs = {i.name for i in model.graph.input} | {i.name for i in model.graph.initializer}
    ks = {n.name: _constant_k(model, n.input[1]) for _, n in nodes if n.op_type == "TopK"}
    wanted = sorted({n.input[0] for _, n in nodes if n.input[0] not in inputs}
                    | {n.input[1] for _, n in nodes
                       if n.op_type == "TopK" and ks[n.name] is None})
    values = dict(feed)
    if wanted:
        values.update(run_with_outputs(graph_path, wanted, feed, threads))
    found = []
    for order, node in nodes:
        x = values.get(node.input[0])
        if x is None or np.ndim(x) == 0:
            continue
        axis = _attr(node, "axis", -1 if node.op_type == "TopK" else 0)
        if node.op_type == "TopK":
            k = ks[node.name]
            if k is None:
                k_value = values.get(node.input[1])
                if k_value is None:
                    continue
                k = int(np.asarray(k_value).reshape(-1)[0])
            places = k
            tied, rows, of = topk_ties(np.asarray(x), k, axis, bool(_attr(node, "largest", 1)),
                                       bool(_attr(node, "sorted", 1)))
        else:
            places = 1
            tied, rows, of = arg_ties(np.asarray(x), axis, node.op_type == "ArgMin")
        if rows:
            found.append(TieSite(node.name, node.op_type, module_of(node) or "",
                                 source_of(node) or "", tied, places, rows, of, order))
    return found

