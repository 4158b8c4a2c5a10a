"""One formula catalogue, two matchers: every catalogue entry, written as torch code and as
ONNX nodes, is found by the fx level and the ONNX level; every exporter shape is found by
the ONNX level's catalogue formulas alone; a spelling added to the catalogue at run time is
found by both levels with no other edit."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from export_gelu.exporter.derive_shapes import reference_formulas
from export_gelu.graph import load
from export_gelu.passes import gelu_catalogue as catalogue
from export_gelu.passes.fx.canonicalize import canonicalize_gelus
from export_gelu.passes.gelu_catalogue import INV_SQRT_2, Spelling, erf, erfc, x
from export_gelu.passes.onnx.exporter_shapes import SHAPES
from export_gelu.passes.onnx.recognise import find_matches, formula_matches
from tests.onnx_graphs import E, G, exporter_shape_graph, feed, gelu_ref, max_diff, rewrite, run_ort


class TorchAlgebra(catalogue.Algebra):
    """A catalogue formula as torch code on the tensor `x`."""

    _FNS = {"tanh": torch.tanh, "erf": torch.erf, "erfc": torch.erfc,
            "sigmoid": torch.sigmoid, "ndtr": torch.special.ndtr}

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value

    def var(self):  # noqa: ANN201
        return self.value

    def const(self, value: float) -> float:
        return value

    def add(self, a, b):  # noqa: ANN001, ANN201
        return a + b

    def mul(self, a, b):  # noqa: ANN001, ANN201
        return a * b

    def neg(self, a):  # noqa: ANN001, ANN201
        return -a

    def div(self, a, divisor: float):  # noqa: ANN001, ANN201
        return a / divisor

    def pow(self, a, exponent: int):  # noqa: ANN001, ANN201
        return torch.pow(a, exponent)

    def fn(self, name: str, a):  # noqa: ANN001, ANN201
        return self._FNS[name](a)


class GraphAlgebra(catalogue.Algebra):
    """A catalogue formula as ONNX nodes (erfc and ndtr through their `Erf` identities)."""

    functions = frozenset(("tanh", "erf", "sigmoid"))

    def __init__(self, g: G, tensor: str) -> None:
        self.g, self.tensor = g, tensor

    def var(self) -> str:
        return self.tensor

    def const(self, value: float) -> str:
        return self.g.c(value)

    def add(self, a: str, b: str) -> str:
        return self.g.add(a, b)

    def mul(self, a: str, b: str) -> str:
        return self.g.mul(a, b)

    def neg(self, a: str) -> str:
        return self.g.op("Neg", a)

    def div(self, a: str, divisor: float) -> str:
        return self.g.op("Div", a, self.g.c(divisor))

    def pow(self, a: str, exponent: int) -> str:
        return self.g.op("Pow", a, self.g.c(float(exponent)))

    def fn(self, name: str, a: str) -> str:
        return self.g.op(name.capitalize(), a)


def _fx_sites(functions: list) -> list:  # noqa: ANN001
    """Sites the fx level finds in one exported program computing functions[i](x_i)."""

    class Many(nn.Module):
        def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(f(v) for f, v in zip(functions, xs))

    args = tuple(torch.randn(2, 8) for _ in functions)
    program = torch.export.export(Many(), args)
    return canonicalize_gelus(program.graph_module)


def _onnx_graph(formula: catalogue.Math) -> onnx.ModelProto:
    """MatMul → the formula → MatMul, as ONNX nodes."""
    rng = np.random.default_rng(0)
    g = G(opset=17)
    h = g.op("MatMul", g.input(), g.c(rng.standard_normal((E, E)) * 0.5))
    y = catalogue.evaluate(formula, GraphAlgebra(g, h))
    return g.model(g.op("MatMul", y, g.c(rng.standard_normal((E, E)) * 0.5)))


def _torch_fn(formula: catalogue.Math):  # noqa: ANN202
    return lambda v: catalogue.evaluate(formula, TorchAlgebra(v))


def test_fx_level_finds_every_entry_and_every_reference_formula():
    refs = list(reference_formulas().items())
    functions = [_torch_fn(e.math) for e in catalogue.ENTRIES] + [f for _n, (_k, f) in refs]
    sites = _fx_sites(functions)
    kinds = [e.kind for e in catalogue.ENTRIES] + [k for _n, (k, _f) in refs]
    assert [s.kind for s in sites] == kinds
    for site, entry in zip(sites, catalogue.ENTRIES):
        assert site.source.startswith(entry.formula), (site.source, entry.name)
        assert site.action.startswith("kept" if entry.kind == "quick" else "canonicalized")


@pytest.mark.parametrize("entry", catalogue.ENTRIES, ids=[e.name for e in catalogue.ENTRIES])
def test_onnx_level_finds_every_entry(entry):
    model = _onnx_graph(entry.math)
    (m,) = find_matches(load(model))
    assert m.kind == entry.kind
    out, (site,) = rewrite(model, "onnx")  # and the rewrite computes what the graph computed
    inputs = feed(model)
    assert max_diff(run_ort(out, inputs), run_ort(model, inputs)) <= 1e-5
    assert site.kind == entry.kind


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s.formula} [{s.exporters[0]}]" for s in SHAPES])
def test_every_exporter_shape_is_a_catalogue_formula(shape):
    graph = load(exporter_shape_graph(shape))
    (by_shape,) = find_matches(graph)
    assert by_shape.kind == shape.kind and "as exported by" in by_shape.shape
    (by_formula,) = formula_matches(graph, set())  # the catalogue alone finds it too
    assert by_formula.kind == shape.kind and sorted(n.name for n in by_formula.nodes) == \
        sorted(n.name for n in by_shape.nodes)


def test_erfc_as_the_dynamo_exporter_writes_it():
    """torch.erfc has no ONNX op: dynamo writes 0.5·x·erfc(−x/√2) as Mul, Neg, Div, Erf,
    Sub(1, ·), Mul. The catalogue's erfc entry, read through its Erf identity, finds it."""
    g = G(opset=18)
    h = g.op("MatMul", g.input(), g.c(np.eye(E) * 2.0))
    half = g.mul(h, g.c(0.5))
    erf_ = g.op("Erf", g.op("Div", g.op("Neg", h), g.c(math.sqrt(2.0))))
    y = g.mul(half, g.op("Sub", g.c(1.0), erf_))
    model = g.model(y)
    (m,) = find_matches(load(model))
    assert m.kind == "exact" and m.shape.startswith("erfc formula")
    inputs = feed(model)
    (ref,) = run_ort(model, inputs)
    assert np.abs(ref - gelu_ref(inputs["x"] @ (np.eye(E) * 2.0), "exact")).max() <= 1e-5


def test_a_spelling_added_at_run_time_is_found_by_both_levels(monkeypatch):
    # x − 0.5·x·erfc(x/√2) = 0.5·x·(1 + erf(x/√2)): new to both levels' rules
    new = Spelling("exact GELU as x − 0.5·x·erfc(x/√2)", "exact", "erfc complement formula",
                   x - 0.5 * x * erfc(x * INV_SQRT_2))
    # the example, written with a division: both levels already reduce it to the erf
    # formula, and keep doing so
    halved = Spelling("x·(1 + erf(x/√2)) / 2", "exact", "halved erf formula",
                      x * (1 + erf(x / math.sqrt(2.0))) / 2)
    fx_fn, graph = _torch_fn(new.math), _onnx_graph(new.math)
    assert _fx_sites([fx_fn]) == [] and find_matches(load(graph)) == []
    assert [s.kind for s in _fx_sites([_torch_fn(halved.math)])] == ["exact"]
    assert [m.kind for m in find_matches(load(_onnx_graph(halved.math)))] == ["exact"]

    monkeypatch.setattr(catalogue, "ENTRIES", catalogue.ENTRIES + (new, halved))
    (site,) = _fx_sites([fx_fn])
    assert site.kind == "exact" and site.source.startswith("erfc complement formula")
    (m,) = find_matches(load(graph))
    assert m.kind == "exact" and m.shape == new.name
    out, _sites = rewrite(graph, "onnx")
    inputs = feed(graph)
    assert max_diff(run_ort(out, inputs), run_ort(graph, inputs)) <= 1e-5
