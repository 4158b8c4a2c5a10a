"""Restriction rows of Einsum: an ellipsis and more than two inputs before 9.0, a diagonal
and broadcasting between inputs before 10.12 (IEinsumLayer's own limits)."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from export_gelu.trt_parser.restriction_records import restriction
from export_gelu.trt_parser.restriction_shared import CHANGELOG, OTRT, einsum_terms, shape_of

EINSUM_WORDS = ("IEinsumLayer: \"TensorRT does not support ellipsis, diagonal operations or "
                "more than two inputs for Einsum\"; docs/operators.md 8.2-8.6: \"Ellipsis and "
                "diagonal operations are not supported. Broadcasting between inputs is not "
                "supported\"")
EINSUM_SOURCE = (f"NVIDIA/TensorRT include/NvInfer.h release/8.2 to release/10.11 (IEinsumLayer; "
                 f"the note is gone in release/10.12); {OTRT} docs/operators.md release/8.2-GA "
                 f"to 9.0-EA; builtin_op_importers.cpp 9.0-GA and onnxOpImporters.cpp "
                 f"release/10.1-GA (Einsum: processEllipsisAndImplicitOutput); {CHANGELOG} "
                 f"(10.12 GA)")


def _equation(node: gs.Node) -> str:
    value = node.attrs.get("equation", "")
    return value.decode() if isinstance(value, bytes) else str(value)


@restriction(key="einsum-ellipsis", op="Einsum", condition="an ellipsis ('...') in the equation",
             since=None, fixed_in="9.0", parser_words=EINSUM_WORDS + "; from 9.0 GA the "
             "parser spells the ellipsis out in letters itself", source=EINSUM_SOURCE)
def _einsum_ellipsis(node: gs.Node, graph: gs.Graph) -> str | None:
    eq = _equation(node)
    return f"equation {eq!r}" if "..." in eq else None


@restriction(key="einsum-inputs", op="Einsum", condition="more than two inputs",
             since=None, fixed_in="9.0", parser_words=EINSUM_WORDS + "; from 9.0 GA the "
             "parser splits it into two-input Einsums", source=EINSUM_SOURCE)
def _einsum_inputs(node: gs.Node, graph: gs.Graph) -> str | None:
    return f"{len(node.inputs)} inputs" if len(node.inputs) > 2 else None


@restriction(key="einsum-diagonal", op="Einsum",
             condition="a diagonal (a label repeated within one operand)",
             since=None, fixed_in="10.12", parser_words=EINSUM_WORDS, source=EINSUM_SOURCE)
def _einsum_diagonal(node: gs.Node, graph: gs.Graph) -> str | None:
    terms, _ = einsum_terms(_equation(node))
    for term in terms:
        letters = [c for c in term.replace("...", "") if c.isalpha()]
        repeated = sorted({c for c in letters if letters.count(c) > 1})
        if repeated:
            return f"operand {term!r} repeats {''.join(repeated)!r}"
    return None


def einsum_dims(term: str, shape: tuple) -> dict[str, object] | None:
    """Label → dim of one operand ('...' dims as '.0', '.1', … from the right); None when the
    operand's rank does not fit the term."""
    left, dots, right = term.partition("...")
    n_ell = len(shape) - len(left) - len(right)
    if n_ell < 0 or (not dots and n_ell):
        return None
    dims: dict[str, object] = {}
    for c, d in zip(left, shape):
        dims[c] = d
    for k in range(n_ell):
        dims[f".{n_ell - 1 - k}"] = shape[len(left) + k]
    for c, d in zip(right, shape[len(left) + n_ell:]):
        dims[c] = d
    return dims


@restriction(key="einsum-broadcast", op="Einsum",
             condition="broadcasting between inputs (a shared label or ellipsis dims of "
                       "different sizes or ranks)",
             since=None, fixed_in="10.12", parser_words=EINSUM_WORDS, source=EINSUM_SOURCE)
def _einsum_broadcast(node: gs.Node, graph: gs.Graph) -> str | None:
    terms, _ = einsum_terms(_equation(node))
    if len(terms) != len(node.inputs):
        return None
    seen: dict[str, object] = {}
    ranks = set()
    for term, tensor in zip(terms, node.inputs):
        shape = shape_of(graph, tensor)
        if shape is None:
            continue
        if "..." in term:
            ranks.add(len(shape) - len(term.replace("...", "")))
        dims = einsum_dims(term, shape)
        if dims is None:
            continue
        for label, d in dims.items():
            other = seen.setdefault(label, d)
            if isinstance(d, int) and isinstance(other, int) and d != other:
                return f"label {label.lstrip('.')!r} is {other} in one input and {d} in another"
    if len(ranks) > 1:
        return f"ellipsis ranks {sorted(ranks)} differ between inputs"
    return None
