"""The numbers in docs/gelu.md, recomputed: error bounds between the GELU forms, where they
occur, the fp16 overflow of x³, and why clamping x changes GELU. The passes' constants
(`passes/sites.py`, `passes/gelu_constants.py`) must agree with them."""

from __future__ import annotations

import math

import torch

from export_gelu.passes.gelu_constants import INV_SQRT_2, QUICK_ALPHA, SQRT_2_OVER_PI, TANH_BETA
from export_gelu.passes.sites import FORM_MAX_ERROR, added_max_error

F64 = torch.float64


def exact(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.erf(x * INV_SQRT_2))


def tanh_form(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.tanh(SQRT_2_OVER_PI * (x + TANH_BETA * x**3)))


def sigmoid_form(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(QUICK_ALPHA * x)


def worst(f, g) -> tuple[float, float]:  # noqa: ANN001
    """Max |f − g| over [−20, 20] (step 1e-4, then 1e-8 around the worst point) and where."""
    x = torch.arange(-200_000, 200_001, dtype=F64) * 1e-4
    i = int((f(x) - g(x)).abs().argmax())
    fine = x[i] + torch.arange(-10_000, 10_001, dtype=F64) * 1e-8
    d = (f(fine) - g(fine)).abs()
    j = int(d.argmax())
    return float(d[j]), float(fine[j])


def test_exact_vs_tanh_bound():
    err, at = worst(exact, tanh_form)
    assert abs(err - 4.7324e-4) < 1e-8 and 2.69 < abs(at) < 2.71, (err, at)  # even in x
    assert FORM_MAX_ERROR["tanh"] == float(f"{err:.3g}") == added_max_error("exact", "tanh")


def test_exact_vs_sigmoid_bound():
    err, at = worst(exact, sigmoid_form)
    assert abs(err - 2.0335e-2) < 5e-7 and 2.26 < abs(at) < 2.28, (err, at)
    assert FORM_MAX_ERROR["sigmoid"] == float(f"{err:.3g}") == added_max_error("erf", "sigmoid")


def test_tanh_vs_sigmoid_bound():
    err, _at = worst(tanh_form, sigmoid_form)
    assert abs(err - 2.066e-2) < 1e-5
    assert added_max_error("tanh", "quick") == float(f"{err:.3g}")


def test_forms_agree_beyond_the_sweep():
    x = torch.tensor([-20.0, 20.0, -60.0, 60.0], dtype=F64)
    for f, g in ((exact, tanh_form), (exact, sigmoid_form), (tanh_form, sigmoid_form)):
        assert float((f(x) - g(x)).abs().max()) < 1e-6


def test_fp16_cube_overflows_just_past_40_3():
    assert math.isclose(65504.0 ** (1 / 3), 40.31, abs_tol=0.01)
    assert torch.isfinite(torch.tensor(40.3, dtype=torch.float16) ** 3)
    assert torch.isinf(torch.tensor(40.4, dtype=torch.float16) ** 3)
    # x·x·0.044715 (the project's fp16-safe tanh form) stays finite up to |x| ≈ 1210
    assert math.isclose(math.sqrt(65504.0 / TANH_BETA), 1210.3, abs_tol=0.1)
    # and bounding the tanh argument at |x| = 10 changes nothing: tanh is 1.0 there in fp32
    arg = torch.tensor(SQRT_2_OVER_PI * (10 + TANH_BETA * 1000), dtype=torch.float32)
    assert float(torch.tanh(arg)) == 1.0


def test_clamping_x_changes_gelu_above_the_clamp():
    x = torch.tensor([5.0, 8.0, 40.0, 100.0], dtype=F64)
    clamped = exact(x.clamp(-6, 6))
    assert float((exact(x) - clamped).abs()[1:].min()) > 1.9  # GELU(x) ≈ x, not ≈ 6
    assert torch.equal(exact(x)[:1], clamped[:1])


def test_landmarks():
    x = torch.arange(-20_000, 0, dtype=F64) * 1e-4
    y = exact(x)
    i = int(y.argmin())
    assert abs(float(y[i]) + 0.16997) < 1e-5 and abs(float(x[i]) + 0.7518) < 1e-3
    assert abs(float(exact(torch.tensor(1.0, dtype=F64))) - 0.841345) < 1e-6
