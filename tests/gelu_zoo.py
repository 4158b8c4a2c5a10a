"""GELU as written in real code, plus decoys that must not be taken for it.

Data, not tests: `SPELLINGS` are modules that each compute one GELU of their input (the
fx passes must find and canonicalize it), `DECOYS` are look-alikes that are not a GELU,
or are one the passes must not rewrite (QuickGELU, wrong constants, shared intermediates,
a clipped GELU whose clip stays). Every entry builds a small `nn.Module` taking one float
tensor `x`; `module(entry)` builds it and `sample_input()` gives an input. Reused by the
fuzzing tests, so keep entries plain and the functions at module level (picklable).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

C = math.sqrt(2.0 / math.pi)  # 0.7978845608028654


class Formula(nn.Module):
    """Applies a module-level function to its input (a Linear first when `linear`)."""

    def __init__(self, fn: Callable[[Tensor], Tensor], features: int = 8,
                 linear: bool = False) -> None:
        super().__init__()
        self.fn = fn
        self.linear = nn.Linear(features, features) if linear else None

    def forward(self, x: Tensor) -> Tensor:
        if self.linear is not None:
            x = self.linear(x)
        return self.fn(x)


class BufferConstants(nn.Module):
    """gelu_new with its constants in registered one-element buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("c", torch.tensor(C))
        self.register_buffer("beta", torch.tensor(0.044715))

    def forward(self, x: Tensor) -> Tensor:
        return 0.5 * x * (1.0 + torch.tanh(self.c * (x + self.beta * torch.pow(x, 3.0))))


# -- spellings: each computes exactly one GELU of x --------------------------------------

def gelu_new(x: Tensor) -> Tensor:  # HF gelu_new (GPT-2, GPT-J, Phi, ALBERT)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                       * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_accurate(x: Tensor) -> Tensor:  # HF gelu_accurate: integer literals
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


def gelu_python_tanh(x: Tensor) -> Tensor:  # HF GELUTanh(use_gelu_tanh_python=True)
    return x * 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                       * (x + 0.044715 * torch.pow(x, 3.0))))


def tanh_cube_as_products(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.tanh(C * (x + 0.044715 * x * x * x)))


def tanh_pow_operator_bracketed(x: Tensor) -> Tensor:  # x ** 3 and x * (0.5 * (…))
    return x * (0.5 * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3))))


def gelu_fast(x: Tensor) -> Tensor:  # HF gelu_fast
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


def bloom_gelu(x: Tensor) -> Tensor:  # Bloom / Megatron bias_gelu
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def tanh_halved_by_division(x: Tensor) -> Tensor:
    return x * (1.0 + torch.tanh(C * (x + 0.044715 * x.pow(3)))) / 2


def tanh_distributed(x: Tensor) -> Tensor:  # 0.5x + 0.5x·tanh(c·x + cβ·x³)
    inner = 0.7978845608 * x + 0.0356774081 * x * x * x
    return 0.5 * x + 0.5 * x * torch.tanh(inner)


def tanh_as_sigmoid(x: Tensor) -> Tensor:  # 0.5(1+tanh z) = sigmoid(2z)
    return x * torch.sigmoid(1.5957691216 * (x + 0.044715 * x ** 3))


def erf_python(x: Tensor) -> Tensor:  # HF gelu_python, ESM
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def erf_half_first(x: Tensor) -> Tensor:
    return 0.5 * x * (1 + torch.erf(x / 1.4142135623730951))


def erf_times_inv_sqrt2(x: Tensor) -> Tensor:  # TF/Keras style: x * 0.7071…
    return x * 0.5 * (1.0 + torch.erf(x * 0.7071067811865476))


def erf_special(x: Tensor) -> Tensor:  # torch.special.erf
    return 0.5 * x * (1.0 + torch.special.erf(x / math.sqrt(2.0)))


def erf_halved_by_division(x: Tensor) -> Tensor:  # jax.nn.gelu(approximate=False) style
    return x * (torch.erf(x / math.sqrt(2.0)) + 1) / 2


def erf_sqrt_of_tensor(x: Tensor) -> Tensor:  # divisor computed from a tensor constant
    return x * 0.5 * (1.0 + torch.erf(x / torch.sqrt(torch.tensor(2.0))))


def erfc_form(x: Tensor) -> Tensor:
    return 0.5 * x * torch.erfc(-x / math.sqrt(2.0))


def ndtr_form(x: Tensor) -> Tensor:  # x·Φ(x)
    return x * torch.special.ndtr(x)


def f_gelu(x: Tensor) -> Tensor:
    return F.gelu(x)


def f_gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")


def aten_gelu(x: Tensor) -> Tensor:
    return torch.ops.aten.gelu(x)


@dataclass(frozen=True)
class Spelling:
    """A module computing one GELU of its input, and the kind the passes must report."""

    name: str
    kind: str  # exact | tanh
    build: Callable[[], nn.Module]
    builtin: bool = False  # already aten.gelu in the graph (nothing to rewrite)


def _formula(fn: Callable[[Tensor], Tensor], linear: bool = False) -> Callable[[], nn.Module]:
    return lambda: Formula(fn, linear=linear)


SPELLINGS: tuple[Spelling, ...] = (
    Spelling("nn.GELU", "exact", nn.GELU, builtin=True),
    Spelling("nn.GELU(tanh)", "tanh", lambda: nn.GELU(approximate="tanh"), builtin=True),
    Spelling("F.gelu", "exact", _formula(f_gelu, linear=True), builtin=True),
    Spelling("F.gelu(tanh)", "tanh", _formula(f_gelu_tanh), builtin=True),
    Spelling("aten.gelu", "exact", _formula(aten_gelu), builtin=True),
    Spelling("gelu_new", "tanh", _formula(gelu_new, linear=True)),
    Spelling("gelu_accurate", "tanh", _formula(gelu_accurate)),
    Spelling("gelu_python_tanh", "tanh", _formula(gelu_python_tanh)),
    Spelling("tanh x*x*x", "tanh", _formula(tanh_cube_as_products)),
    Spelling("tanh x**3 bracketed", "tanh", _formula(tanh_pow_operator_bracketed)),
    Spelling("gelu_fast", "tanh", _formula(gelu_fast, linear=True)),
    Spelling("bloom", "tanh", _formula(bloom_gelu, linear=True)),
    Spelling("tanh /2", "tanh", _formula(tanh_halved_by_division)),
    Spelling("tanh distributed", "tanh", _formula(tanh_distributed)),
    Spelling("tanh as sigmoid", "tanh", _formula(tanh_as_sigmoid)),
    Spelling("tanh constants in buffers", "tanh", BufferConstants),
    Spelling("erf gelu_python", "exact", _formula(erf_python, linear=True)),
    Spelling("erf 0.5*x first", "exact", _formula(erf_half_first)),
    Spelling("erf x*0.7071", "exact", _formula(erf_times_inv_sqrt2)),
    Spelling("torch.special.erf", "exact", _formula(erf_special)),
    Spelling("erf /2", "exact", _formula(erf_halved_by_division)),
    Spelling("erf sqrt(tensor(2))", "exact", _formula(erf_sqrt_of_tensor)),
    Spelling("erfc", "exact", _formula(erfc_form)),
    Spelling("x*ndtr(x)", "exact", _formula(ndtr_form)),
)


# -- decoys: not a GELU, or a GELU the passes must not rewrite ---------------------------

def quick_gelu(x: Tensor) -> Tensor:  # CLIP: a different function, its own kind
    return x * torch.sigmoid(1.702 * x)


def wrong_beta(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.tanh(C * (x + 0.05 * torch.pow(x, 3.0))))


def wrong_sqrt_2_over_pi(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.tanh(0.8 * (x + 0.044715 * torch.pow(x, 3.0))))


def wrong_half(x: Tensor) -> Tensor:
    return 0.6 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def wrong_erf_scale(x: Tensor) -> Tensor:
    return x * 0.5 * (1.0 + torch.erf(x / 2.0))


def minus_tanh(x: Tensor) -> Tensor:  # x - GELU(x)
    return 0.5 * x * (1.0 - torch.tanh(C * (x + 0.044715 * torch.pow(x, 3.0))))


def two_inputs(x: Tensor) -> Tensor:  # the formula's x is two different values
    y = x + 1.0
    return 0.5 * x * (1.0 + torch.tanh(C * (y + 0.044715 * torch.pow(y, 3.0)))) + y


def shared_tanh(x: Tensor) -> Tensor:  # the tanh value has another user
    t = torch.tanh(C * (x + 0.044715 * torch.pow(x, 3.0)))
    return 0.5 * x * (1.0 + t) + t


def shared_cube(x: Tensor) -> Tensor:  # pow(x, 3) has another user
    cube = torch.pow(x, 3.0)
    return 0.5 * x * (1.0 + torch.tanh(C * (x + 0.044715 * cube))) - cube


def shared_erf_arg(x: Tensor) -> Tensor:  # x/√2 has another user
    z = x / math.sqrt(2.0)
    return x * 0.5 * (1.0 + torch.erf(z)) * z


def silu(x: Tensor) -> Tensor:
    return x * torch.sigmoid(x)


def laplace(x: Tensor) -> Tensor:  # HF LaplaceActivation (MEGA): erf, but not a GELU
    z = (x - 0.707107).div(0.282095 * math.sqrt(2.0))
    return 0.5 * (1.0 + torch.erf(z))


def mish(x: Tensor) -> Tensor:
    return x * torch.tanh(F.softplus(x))


def clipped_gelu(x: Tensor) -> Tensor:  # HF gelu_10: the inner GELU is a site, the clip stays
    return torch.clip(F.gelu(x), -10.0, 10.0)


@dataclass(frozen=True)
class Decoy:
    """A look-alike: the kinds of the sites it holds, and why it must stay as written."""

    name: str
    build: Callable[[], nn.Module]
    sites: tuple[str, ...]  # kinds of the sites the passes must report (nothing rewritten)
    why: str


DECOYS: tuple[Decoy, ...] = (
    Decoy("QuickGELU", _formula(quick_gelu), ("quick",), "x*sigmoid(1.702x) is another function"),
    Decoy("wrong β", _formula(wrong_beta), (), "β = 0.05, not 0.044715"),
    Decoy("wrong √(2/π)", _formula(wrong_sqrt_2_over_pi), (), "0.8, not 0.79788"),
    Decoy("wrong 0.5", _formula(wrong_half), (), "0.6·x·(1+erf)"),
    Decoy("wrong erf scale", _formula(wrong_erf_scale), (), "erf(x/2), not erf(x/√2)"),
    Decoy("1 - tanh", _formula(minus_tanh), (), "computes x - GELU(x)"),
    Decoy("two inputs", _formula(two_inputs), (), "tanh's argument is x+1, not x"),
    Decoy("shared tanh", _formula(shared_tanh), (), "the tanh value has another user"),
    Decoy("shared cube", _formula(shared_cube), (), "pow(x,3) has another user"),
    Decoy("shared erf argument", _formula(shared_erf_arg), (), "x/√2 has another user"),
    Decoy("SiLU", _formula(silu), (), "x*sigmoid(x)"),
    Decoy("Laplace", _formula(laplace), (), "0.5(1+erf(…)) without the x factor"),
    Decoy("Mish", _formula(mish), (), "x*tanh(softplus(x))"),
    Decoy("ClippedGELU", _formula(clipped_gelu), ("exact",), "the GELU is a site; the clip stays"),
)


def module(entry: Spelling | Decoy) -> nn.Module:
    """A fresh, seeded module for a zoo entry, in eval mode."""
    torch.manual_seed(0)
    return entry.build().eval()


def sample_input(seed: int = 0, shape: tuple[int, ...] = (4, 8), scale: float = 4.0) -> Tensor:
    """Inputs spread over the range where the GELU forms differ (|x| up to ~15)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * scale


__all__ = ["SPELLINGS", "DECOYS", "Spelling", "Decoy", "module", "sample_input"]
