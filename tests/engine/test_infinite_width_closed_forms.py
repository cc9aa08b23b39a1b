"""Θ∞ and Σ∞ on inputs small enough to compute by hand, and the quadrature route against closed forms and references.

One hidden layer, no biases, ntk parameterization, inputs in R² with x·x'/2 = Σ¹(x, x'):
x₁ = (√2, 0), x₂ = (0, √2), x₃ = (1, 1) give Σ¹ = 1 on the diagonal, Σ¹(x₁, x₂) = 0 and
Σ¹(x₁, x₃) = 1/√2. Then Σ∞ = E[σ(u)σ(v)] and Θ∞ = Σ∞ + E[σ'(u)σ'(v)]·Σ¹.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special

from ntklab.api_schemas.spec import AnyModel, model_spec
from ntklab.engine.limits import gauss_hermite
from ntklab.engine.limits.infinite_width import limit_kernels

X = torch.tensor([[math.sqrt(2), 0.0], [0.0, math.sqrt(2)], [1.0, 1.0]], dtype=torch.float64)
R = 1 / math.sqrt(2)  # Σ¹(x₁, x₃)


def one_layer(activation: str, **fields) -> AnyModel:
    return model_spec(hidden=[7], activation=activation, bias=False, output_dim=1, **fields)


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
    trained = limit_kernels(model_spec(hidden=[5], activation="identity", output_dim=1), X)
    frozen = limit_kernels(model_spec(hidden=[5], activation="identity", output_dim=1, train_output_layer=False), X)
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

VARIANCES = torch.tensor([0.3, 1.0, 2.5, 10.0, 40.0], dtype=torch.float64)
RHOS = (1.0, -1.0, 1 - 1e-9, -(1 - 1e-6), 0.999, -0.99, 0.9, 0.3, 0.0)
ROUNDING = 1e-12  # relative rounding no estimate counts: the 4096-node Hermite recurrences lose up to ≈ 5e-13


def pairs(rho: float, variance: torch.Tensor = VARIANCES) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """variance [n, 1], covariance [n, n, 1, 1] = ρ√(a_i a_j) (every pair at correlation ρ) and the pairs' a, b [n, n, 1, 1]."""
    a, b = variance[:, None, None, None], variance[None, :, None, None]
    return variance[:, None], rho * torch.sqrt(a * b), torch.broadcast_tensors(a, b)


def self_scale(name: str, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """√(E[g(u)²] E[g(v)²]) for g = σ, σ', from the closed form at ρ = 1 — the scale the bound is relative to."""
    ua, ub = gauss_hermite.closed_form(name, a, a, a), gauss_hermite.closed_form(name, b, b, b)
    return torch.sqrt(ua[0] * ub[0]), torch.sqrt(ua[1] * ub[1])


@pytest.mark.parametrize("rho", RHOS)
def test_quadrature_matches_erf_to_1e_8_at_every_correlation(rho):
    """erf through the quadrature route (Mehler, and the polar rule where Mehler's bound fails: the large
    variances at |ρ| ≈ 1), against Williams' closed form, and its per-pair bound against the true error."""
    variance, covariance, (a, b) = pairs(rho)
    E, Edot, _, bound = gauss_hermite.quadrature("erf", variance, covariance, tolerance=1e-10)
    exact = gauss_hermite.closed_form("erf", a, b, covariance)
    scale = self_scale("erf", a, b)
    assert (bound <= 1e-10).all()
    for value, truth, s in zip((E, Edot), exact, scale):
        torch.testing.assert_close(value, truth, rtol=0, atol=1e-8)
        assert ((value - truth).abs() <= (bound + ROUNDING) * s).all()


def test_erf_near_rho_1_at_large_variance_needs_the_polar_rule():
    """At variance 40 the largest Mehler rule's bound at ρ = 1 is far above 1e-10, so the pairs near ρ = ±1 are
    the polar rule's; they reach 1e-10 all the same."""
    assert gauss_hermite.choose_expansion("erf", torch.tensor([40.0], dtype=torch.float64), 1e-10).bound > 1e-6
    variance, covariance, (a, b) = pairs(1 - 1e-9, torch.tensor([40.0, 30.0], dtype=torch.float64))
    E, Edot, _, bound = gauss_hermite.quadrature("erf", variance, covariance, tolerance=1e-10)
    exact = gauss_hermite.closed_form("erf", a, b, covariance)
    torch.testing.assert_close(E, exact[0], rtol=0, atol=1e-10)
    torch.testing.assert_close(Edot, exact[1], rtol=0, atol=1e-10)


def test_the_error_bound_holds_at_a_loose_tolerance():
    """At tolerance 1e-4 the errors are visible, and every pair's bound still covers its true error."""
    worst = 0.0
    for rho in RHOS:
        variance, covariance, (a, b) = pairs(rho)
        E, Edot, _, bound = gauss_hermite.quadrature("erf", variance, covariance, tolerance=1e-4)
        exact = gauss_hermite.closed_form("erf", a, b, covariance)
        for value, truth, s in zip((E, Edot), exact, self_scale("erf", a, b)):
            error = (value - truth).abs() / s
            assert (error <= bound + ROUNDING).all()
            worst = max(worst, error.max().item())
        assert (bound <= 1e-4).all()
    assert worst > 1e-10, "a loose tolerance should leave a visible error"


def test_mehler_bound_holds_for_the_series_alone():
    """|Σ_k<K ρ^k c_k(a) c_k(b) − exact| ≤ B·scale for erf at every ρ including ±1 (no polar rule involved),
    and B is attained within a factor 2 at ρ = 1."""
    rule = gauss_hermite.choose_expansion("erf", VARIANCES[:3], 1e-5)
    assert rule.bound <= 1e-5
    left, right = rule.at((slice(None), None)), rule.at((None, slice(None)))
    a, b = VARIANCES[:3, None], VARIANCES[None, :3]
    worst = 0.0
    for rho in RHOS:
        rho_t = torch.full((3, 3), rho, dtype=torch.float64)
        series = gauss_hermite.series(left.coefficients, right.coefficients, rho_t[..., None])
        exact = gauss_hermite.closed_form("erf", a, b, rho_t * torch.sqrt(a * b))
        bound = gauss_hermite.mehler_bound(left, right, rho_t)
        for g, s in enumerate(self_scale("erf", a, b)):
            error = (series[..., g] - exact[g]).abs() / s
            assert (error <= bound + ROUNDING).all()
            worst = max(worst, error.max().item())
    assert worst > rule.bound / 2, "the bound is attained at ρ = 1"


@pytest.mark.parametrize("rho", (1.0, -1.0, 0.999, -0.95, 0.5, 0.0))
def test_quadrature_matches_relu_arc_cosine_at_every_correlation(rho):
    """relu's kink (its Hermite coefficients decay like k^(−5/4), its step σ' like k^(−3/4)) leaves Mehler's bound
    above the tolerance; the polar rule, split where u or v changes sign, meets it for E[σσ] and E[σ'σ'] alike."""
    variance, covariance, (a, b) = pairs(rho, VARIANCES[:4])
    E, Edot, _, bound = gauss_hermite.quadrature("relu", variance, covariance, tolerance=1e-6)
    exact = gauss_hermite.closed_form("relu", a, b, covariance)
    torch.testing.assert_close(E, exact[0], rtol=0, atol=1e-4)
    torch.testing.assert_close(Edot, exact[1], rtol=0, atol=1e-4)
    for value, truth, s in zip((E, Edot), exact, self_scale("relu", a, b)):
        assert ((value - truth).abs() <= (bound + ROUNDING) * s).all()


# An independent reference for the activations without closed forms: scipy's adaptive quadrature, with σ'
# written out by hand (not autograd), in the whitened coordinates u = √a z₁, v = √b(ρ z₁ + √(1−ρ²) z₂).
SMOOTH = {
    "tanh": (np.tanh, lambda z: 1 - np.tanh(z) ** 2),
    "gelu": (
        lambda z: z * special.ndtr(z),
        lambda z: special.ndtr(z) + z * np.exp(-z * z / 2) / math.sqrt(2 * math.pi),
    ),
}


def reference(g, a: float, b: float, rho: float) -> float:
    """E[g(u) g(v)] by nested adaptive quadrature (a 1-D one at ρ = ±1)."""

    def density(z):
        return math.exp(-z * z / 2) / math.sqrt(2 * math.pi)

    options = dict(epsabs=1e-14, epsrel=1e-13, limit=200)
    if abs(rho) == 1.0:
        return integrate.quad(
            lambda z: density(z) * g(math.sqrt(a) * z) * g(rho * math.sqrt(b) * z), -12, 12, points=[0], **options
        )[0]
    s = math.sqrt(1 - rho * rho)

    def inner(z1):
        return integrate.quad(lambda z2: density(z2) * g(math.sqrt(b) * (rho * z1 + s * z2)), -12, 12, **options)[0]

    return integrate.quad(lambda z1: density(z1) * g(math.sqrt(a) * z1) * inner(z1), -12, 12, points=[0], **options)[0]


@pytest.mark.parametrize("name", sorted(SMOOTH))
@pytest.mark.parametrize(
    "a, b, rho", [(1.0, 1.0, 1.0), (2.5, 0.3, -0.999), (1.0, 2.5, 0.6), (40.0, 40.0, 1.0), (40.0, 10.0, 0.9999)]
)
def test_smooth_activations_against_adaptive_quadrature(name, a, b, rho):
    """tanh and gelu (no closed form) to 1e-9 against the adaptive reference, small and large variances, ρ = ±1 included."""
    variance = torch.tensor([a, b], dtype=torch.float64)
    covariance = torch.full((2, 2, 1, 1), rho * math.sqrt(a * b), dtype=torch.float64)
    E, Edot, _, bound = gauss_hermite.quadrature(name, variance[:, None], covariance, tolerance=1e-11)
    sigma, derivative = SMOOTH[name]
    assert E[0, 1].item() == pytest.approx(reference(sigma, a, b, rho), abs=1e-9)
    assert Edot[0, 1].item() == pytest.approx(reference(derivative, a, b, rho), abs=1e-9)
    assert bound[0, 1].item() <= 1e-11


@pytest.mark.parametrize("name", ["tanh", "gelu", "softplus", "swish", "sigmoid"])
def test_every_smooth_activation_reaches_the_stated_accuracy(name):
    """A layer's expectations at tolerance 1e-10 against those at 1e-12: within 2e-10 of the scale, and the
    bound the layer reports is ≤ 1e-10 (variances up to 8, ρ = 1 and 0.9999 included)."""
    variance = torch.tensor([[0.5], [2.0], [8.0]], dtype=torch.float64)
    rho = torch.tensor([[1.0, 0.3, -0.8], [0.3, 1.0, 0.9999], [-0.8, 0.9999, 1.0]], dtype=torch.float64)
    covariance = (rho * torch.sqrt(variance * variance.T))[..., None, None]
    E, Edot, _, error = gauss_hermite.layer_expectations(name, variance, covariance, tolerance=1e-10)
    fine = gauss_hermite.quadrature(name, variance, covariance, tolerance=1e-12)
    assert error <= 1e-10
    second = torch.diagonal(fine[0][..., 0, 0]), torch.diagonal(fine[1][..., 0, 0])
    for value, truth, s in zip((E, Edot), fine, second):
        assert ((value - truth).abs()[..., 0, 0] <= 2e-10 * torch.sqrt(s[:, None] * s[None, :])).all()
