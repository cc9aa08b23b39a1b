"""Θ∞ and Σ∞ on inputs small enough to compute by hand, and the Gauss–Hermite route against the closed forms.

One hidden layer, no biases, ntk parameterization, inputs in R² with x·x'/2 = Σ¹(x, x'):
x₁ = (√2, 0), x₂ = (0, √2), x₃ = (1, 1) give Σ¹ = 1 on the diagonal, Σ¹(x₁, x₂) = 0 and
Σ¹(x₁, x₃) = 1/√2. Then Σ∞ = E[σ(u)σ(v)] and Θ∞ = Σ∞ + E[σ'(u)σ'(v)]·Σ¹.
"""

from __future__ import annotations

import math

import pytest
import torch

from api_schemas.spec import ModelSpec
from workers.engine import gauss_hermite
from workers.engine.infinite_width import limit_kernels

X = torch.tensor([[math.sqrt(2), 0.0], [0.0, math.sqrt(2)], [1.0, 1.0]], dtype=torch.float64)
R = 1 / math.sqrt(2)  # Σ¹(x₁, x₃)


def one_layer(activation: str, **fields) -> ModelSpec:
    return ModelSpec(hidden=[7], activation=activation, bias=False, output_dim=1, **fields)


def test_relu_is_the_arc_cosine_kernel_by_hand():
    limit = limit_kernels(one_layer("relu"), X)
    # θ = π/2 between x₁, x₂: E[σσ] = 1/(2π), E[σ'σ'] = 1/4; θ = 0 on the diagonal: 1/2 and 1/2; θ = π/4 for x₁, x₃
    e13 = (math.sin(math.pi / 4) + 0.75 * math.pi * math.cos(math.pi / 4)) / (2 * math.pi)
    assert limit.nngp[0, 0].item() == pytest.approx(0.5, rel=1e-14)
    assert limit.nngp[0, 1].item() == pytest.approx(1 / (2 * math.pi), rel=1e-14)
    assert limit.nngp[0, 2].item() == pytest.approx(e13, rel=1e-14)
    assert limit.ntk[0, 0].item() == pytest.approx(0.5 + 0.5 * 1, rel=1e-14)
    assert limit.ntk[0, 1].item() == pytest.approx(1 / (2 * math.pi) + 0.25 * 0, rel=1e-14)
    assert limit.ntk[0, 2].item() == pytest.approx(e13 + 3 / 8 * R, rel=1e-14)
    assert limit.quadrature_error == 0.0


def test_erf_is_williams_kernel_by_hand():
    limit = limit_kernels(one_layer("erf"), X)
    e11 = 2 / math.pi * math.asin(2 / 3)
    e13 = 2 / math.pi * math.asin(2 * R / 3)
    assert limit.nngp[0, 0].item() == pytest.approx(e11, rel=1e-14)
    assert limit.nngp[0, 1].item() == pytest.approx(0.0, abs=1e-15)
    assert limit.ntk[0, 0].item() == pytest.approx(e11 + 4 / (math.pi * math.sqrt(5)), rel=1e-14)
    assert limit.ntk[0, 2].item() == pytest.approx(e13 + 4 / (math.pi * math.sqrt(7)) * R, rel=1e-14)


def test_biases_and_a_frozen_readout_by_hand():
    """identity activation with biases: Σ¹ = x·x'/2 + 1, Σ∞ = Σ¹ + 1, Θ∞ = (Σ¹ + 1) + 1·Θ¹ with Θ¹ = Σ¹;
    a frozen readout leaves only the backward term Θ¹."""
    s1 = X @ X.T / 2 + 1
    trained = limit_kernels(ModelSpec(hidden=[5], activation="identity", output_dim=1), X)
    frozen = limit_kernels(ModelSpec(hidden=[5], activation="identity", output_dim=1, train_output_layer=False), X)
    torch.testing.assert_close(trained.nngp, s1 + 1, rtol=1e-14, atol=0)
    torch.testing.assert_close(trained.ntk, (s1 + 1) + s1, rtol=1e-14, atol=0)
    torch.testing.assert_close(frozen.ntk, s1, rtol=1e-14, atol=0)


def test_standard_parameterization_weighs_each_layer_by_its_fan_in():
    """Under standard, c = 1: each weight layer's term is fan_in times ntk's (2 for the input layer, 7 for the readout)."""
    ntk = limit_kernels(one_layer("relu"), X)
    standard = limit_kernels(one_layer("relu", parameterization="standard"), X)
    s1 = X @ X.T / 2
    e_dot = (ntk.ntk - ntk.nngp) / torch.where(s1 != 0, s1, 1.0)  # E[σ'σ'] where Σ¹ ≠ 0
    expected = 7 * ntk.nngp + e_dot * 2 * s1
    torch.testing.assert_close(standard.ntk, expected, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(standard.nngp, ntk.nngp, rtol=0, atol=0)


def test_quadratic_by_isserlis():
    limit = limit_kernels(one_layer("quadratic"), X)
    s1 = X @ X.T / 2
    d = torch.diagonal(s1)
    torch.testing.assert_close(limit.nngp, (d[:, None] * d[None, :] + 2 * s1**2) / 4, rtol=1e-14, atol=0)
    torch.testing.assert_close(limit.ntk, limit.nngp + s1 * s1, rtol=1e-14, atol=0)


# --------------------------------------------------------------------------- quadrature vs closed forms

A = torch.tensor([0.3, 1.0, 2.5, 0.7, 4.0], dtype=torch.float64)
B = torch.tensor([1.7, 1.0, 0.4, 0.7, 4.0], dtype=torch.float64)
RHO = torch.tensor([0.2, -0.6, 0.9, 1.0, -0.95], dtype=torch.float64)


def by_quadrature(name: str, order: int) -> tuple[torch.Tensor, torch.Tensor]:
    """E[σσ], E[σ'σ'] for the pairs (A, B, RHO) through the Hermite coefficients of gauss_hermite.py."""
    rule = gauss_hermite.expansion(name, torch.cat([A, B]), order)
    c, d = rule.c, rule.d
    n = len(A)
    return gauss_hermite.series(c[:n], c[n:], RHO), gauss_hermite.series(d[:n], d[n:], RHO)


def test_quadrature_matches_erf_to_1e_8():
    exact = gauss_hermite.closed_form("erf", A, B, RHO * torch.sqrt(A * B))
    rule = gauss_hermite.choose_expansion("erf", torch.cat([A, B]), 1e-12)
    assert rule.error <= 1e-12
    quad = by_quadrature("erf", rule.order)
    torch.testing.assert_close(quad[0], exact[0], rtol=0, atol=1e-8)
    torch.testing.assert_close(quad[1], exact[1], rtol=0, atol=1e-8)


def test_quadrature_matches_relu_to_1e_4_away_from_rho_1():
    """relu's kink: its Hermite coefficients decay like k^(−5/4), so at ρ = ±1 the series is slow; below, ρ^k helps."""
    inside = RHO.abs() < 0.99
    exact = gauss_hermite.closed_form("relu", A, B, RHO * torch.sqrt(A * B))
    quad = by_quadrature("relu", 4096)  # the 1-D rule converges like 1/N across the kink
    torch.testing.assert_close(quad[0][inside], exact[0][inside], rtol=0, atol=1e-4)
    assert (quad[1][inside] - exact[1][inside]).abs().max() < 1e-2  # the step σ' converges slower still


def test_the_truncation_bound_holds():
    """|series − exact| ≤ bound·√(E[σ(u)²]·E[σ(v)²]) for erf, at every ρ including ±1."""
    exact = gauss_hermite.closed_form("erf", A, B, RHO * torch.sqrt(A * B))
    rule = gauss_hermite.expansion("erf", torch.cat([A, B]), 256).truncated(1e-5)
    n = len(A)
    series = gauss_hermite.series(rule.c[:n], rule.c[n:], RHO)
    scale = torch.sqrt(gauss_hermite.closed_form("erf", A, A, A)[0] * gauss_hermite.closed_form("erf", B, B, B)[0])
    assert rule.error <= 1e-5
    assert ((series - exact[0]).abs() <= rule.error * scale + 1e-14).all()
    assert (series - exact[0]).abs().max() > 1e-9, "a 1e-5 truncation should be visible"


@pytest.mark.parametrize("name", ["tanh", "gelu", "softplus", "swish", "sigmoid"])
def test_smooth_activations_reach_the_stated_accuracy(name):
    """The chosen rule against one four times finer: they agree within the stated bound (relative to E[σ²])."""
    variance = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    rule = gauss_hermite.choose_expansion(name, variance, 1e-10)
    assert rule.error <= 1e-10
    fine = gauss_hermite.expansion(name, variance, 4 * rule.order)
    rho = torch.tensor([0.3, -0.8, 0.99], dtype=torch.float64)
    coarse_value = gauss_hermite.series(rule.c, rule.c.roll(1, 0), rho)
    fine_value = gauss_hermite.series(fine.c, fine.c.roll(1, 0), rho)
    scale = (fine.c**2).sum(-1).max()
    assert (coarse_value - fine_value).abs().max() <= 1e-9 * scale
