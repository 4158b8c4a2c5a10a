"""The fx passes on the GELU zoo: every spelling found and rewritten, every decoy untouched."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from torch import fx, nn

from export_gelu.passes.fx import canonicalize_gelus, run_fx_passes
from export_gelu.passes.fx.canonicalize import GELU, gelu_kind
from export_gelu.passes.fx.patterns import LITERAL_RTOL, RULES, close
from tests.gelu_zoo import DECOYS, SPELLINGS, Decoy, Spelling, module, sample_input

#: Ops a canonicalized GELU must leave behind: none of its formula's pieces.
FORMULA_OPS = {"aten.tanh.default", "aten.erf.default", "aten.special_erf.default",
               "aten.erfc.default", "aten.special_ndtr.default", "aten.sigmoid.default",
               "aten.pow.Tensor_Scalar"}


def _export(entry: Spelling | Decoy | nn.Module, x: torch.Tensor) -> torch.export.ExportedProgram:
    mod = entry if isinstance(entry, nn.Module) else module(entry)
    with torch.no_grad():
        return torch.export.export(mod, (x,), strict=False)


def _ops(gm: fx.GraphModule) -> Counter:
    return Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def _run(program: torch.export.ExportedProgram, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return program.module()(x)


def test_the_zoo_is_big_enough():
    assert len(SPELLINGS) >= 14 and len(DECOYS) >= 5
    assert len({s.name for s in SPELLINGS}) == len(SPELLINGS)
    assert sum(not s.builtin for s in SPELLINGS) >= 14  # hand-written formulas alone


@pytest.mark.parametrize("spelling", SPELLINGS, ids=lambda s: s.name)
def test_every_spelling_becomes_one_aten_gelu(spelling: Spelling):
    x = sample_input()
    program = _export(spelling, x)
    before = _run(program, x)
    sites = run_fx_passes(program, "keep")

    assert [s.kind for s in sites] == [spelling.kind]
    ops = _ops(program.graph_module)
    assert ops[str(GELU)] == 1
    assert not FORMULA_OPS & set(ops), ops  # no piece of the formula left behind
    (node,) = [n for n in program.graph.nodes if n.target is GELU]
    assert gelu_kind(node) == spelling.kind
    assert sites[0].name == node.name and sites[0].level == "fx"
    want = "kept" if spelling.builtin else "canonicalized to aten.gelu"
    assert sites[0].action.startswith(want) and sites[0].added_max_error == 0.0
    assert float((_run(program, x) - before).abs().max()) <= 1e-6


@pytest.mark.parametrize("decoy", DECOYS, ids=lambda d: d.name)
def test_every_decoy_is_left_as_written(decoy: Decoy):
    x = sample_input()
    program = _export(decoy, x)
    before_ops = _ops(program.graph_module)
    before = _run(program, x)
    sites = run_fx_passes(program, "keep")

    assert [s.kind for s in sites] == list(decoy.sites), decoy.why
    assert _ops(program.graph_module) == before_ops, decoy.why
    assert torch.equal(_run(program, x), before)


def test_quick_gelu_is_its_own_kind_and_kept():
    program = _export(next(d for d in DECOYS if d.name == "QuickGELU"), sample_input())
    (site,) = run_fx_passes(program, "keep")
    assert site.kind == "quick" and site.action.startswith("kept")
    assert "1.702" in site.source


def test_clipped_gelu_keeps_its_clip():
    program = _export(next(d for d in DECOYS if d.name == "ClippedGELU"), sample_input())
    (site,) = run_fx_passes(program, "tanh")
    ops = _ops(program.graph_module)
    assert ops[str(GELU)] == 1 and ops["aten.clip.default"] == 1
    assert site.kind == "exact" and "tanh" in site.action


class _Tanh(nn.Module):
    def __init__(self, c: float, beta: float = 0.044715) -> None:
        super().__init__()
        self.c, self.beta = c, beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(self.c * (x + self.beta * torch.pow(x, 3.0))))


@pytest.mark.parametrize("c", [math.sqrt(2 / math.pi), 0.7978845608, 0.79788456, 0.797885,
                               0.7979])
def test_literal_tolerance_accepts_the_spellings_of_sqrt_2_over_pi(c: float):
    program = _export(_Tanh(c), sample_input())
    assert [s.kind for s in canonicalize_gelus(program.graph_module)] == ["tanh"]


@pytest.mark.parametrize("c, beta", [(0.8, 0.044715), (0.7978, 0.044715), (0.79, 0.044715),
                                     (math.sqrt(2 / math.pi), 0.0447),
                                     (math.sqrt(2 / math.pi), 0.04)])
def test_literal_tolerance_rejects_other_coefficients(c: float, beta: float):
    program = _export(_Tanh(c, beta), sample_input())
    assert canonicalize_gelus(program.graph_module) == []
    assert _ops(program.graph_module)["aten.tanh.default"] == 1


def test_tolerance_constant_is_the_documented_one():
    assert LITERAL_RTOL == 1e-4
    assert close(0.79788456, math.sqrt(2 / math.pi)) and not close(0.7978, math.sqrt(2 / math.pi))
    assert {r.kind for r in RULES} == {"exact", "tanh", "quick"}


class _TwoGelus(nn.Module):
    """Two formulas, one shared input, one output consuming both (sites must not collide)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
        b = 0.5 * x * (1.0 + torch.tanh(0.7978845608 * x * (1.0 + 0.044715 * x * x)))
        return a * b


def test_two_formulas_on_one_input_are_two_sites():
    x = sample_input()
    program = _export(_TwoGelus(), x)
    before = _run(program, x)
    sites = run_fx_passes(program)
    assert sorted(s.kind for s in sites) == ["exact", "tanh"]
    assert _ops(program.graph_module)[str(GELU)] == 2
    torch.testing.assert_close(_run(program, x), before, atol=1e-5, rtol=1e-6)


class _ScaledGelu(nn.Module):
    """2·GELU(x) written as x*(1+erf(x/√2)): not a GELU; the graph must stay as it is."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def test_a_scaled_gelu_is_not_a_gelu():
    program = _export(_ScaledGelu(), sample_input())
    assert canonicalize_gelus(program.graph_module) == []


class _IntegerInput(nn.Module):
    """The formula on an int tensor promotes to float: aten.gelu would not take it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.special.ndtr(x)


def test_a_formula_that_promotes_its_dtype_is_not_rewritten():
    program = _export(_IntegerInput(), torch.arange(-4, 4))
    assert canonicalize_gelus(program.graph_module) == []


def test_sites_carry_module_path_and_source():
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.act = module(next(s for s in SPELLINGS if s.name == "gelu_new"))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(self.fc(x))

    program = _export(Block(), sample_input())
    (site,) = run_fx_passes(program)
    assert site.module == "act"
    assert site.source == "tanh formula with pow(x, 3) in Formula"


def test_dynamic_batch_dimension_is_kept():
    spelling = next(s for s in SPELLINGS if s.name == "bloom")
    batch = torch.export.Dim("batch")
    with torch.no_grad():
        program = torch.export.export(module(spelling), (sample_input(),),
                                      dynamic_shapes=({0: batch},), strict=False)
    assert [s.kind for s in run_fx_passes(program)] == ["tanh"]
    x = sample_input(seed=2, shape=(7, 8))
    with torch.no_grad():
        want = module(spelling)(x)
    assert float((_run(program, x) - want).abs().max()) <= 1e-6
