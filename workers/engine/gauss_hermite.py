"""Gaussian expectations of an activation σ: the layer maps of the infinite-width kernels.

For (u, v) ~ N(0, [[a, c], [c, b]]) — a, b the variances of a unit at two inputs, c their covariance:

    E[σ(u) σ(v)]      the next layer's NNGP kernel
    E[σ'(u) σ'(v)]    the factor of the NTK's backward term
    E[σ(u)]           a unit's mean (residual sums carry it)

Closed forms (cos θ = ρ = c/√(ab)):

    relu       E[σσ] = √(ab)/(2π) · (sin θ + (π − θ) cos θ),   E[σ'σ'] = (π − θ)/(2π),   E[σ] = √(a/(2π))
               (the arc-cosine kernels of Cho & Saul 2009)
    erf        E[σσ] = (2/π) arcsin(2c / √((1+2a)(1+2b))),     E[σ'σ'] = (4/π) / √((1+2a)(1+2b) − 4c²),  E[σ] = 0
               (Williams 1997)
    identity   E[σσ] = c,   E[σ'σ'] = 1,   E[σ] = 0
    quadratic  σ = z²/2:  E[σσ] = (ab + 2c²)/4,   E[σ'σ'] = c,   E[σ] = a/2   (Isserlis)

Every other activation (tanh, gelu, softplus, swish, sigmoid) by Gauss–Hermite quadrature, through
Mehler's expansion of the bivariate Gaussian: with h_k = He_k/√k! the orthonormal (probabilists')
Hermite polynomials and s ~ N(0, 1),

    E[σ(u) σ(v)] = Σ_k ρ^k · c_k(a) · c_k(b),      c_k(a) = E[σ(√a s) h_k(s)]     (likewise σ' with d_k),

so the 2-D expectation costs one 1-D Gauss–Hermite rule per point and variance (nodes s_m and
weights w_m of order N: scipy.special.roots_hermitenorm, numpy's hermite_e.hermegauss rule, which
overflows past N = 256) plus K terms per pair, instead of N² nodes per pair. Truncating at K terms
errs by at most √(T(a)·T(b)) with the tail T(a) = E[σ(√a s)²] − Σ_{k<K} c_k(a)² (Cauchy–Schwarz,
|ρ| ≤ 1) — the bound is attained at ρ = 1 and shrinks like |ρ|^K below it. The rule is chosen to
a stated accuracy: the smallest N of ORDERS and K ≤ N/2 for which T/E[σ²] and T'/E[σ'²] ≤ tolerance
at every point's variance; σ is then resolved by polynomials of degree K ≤ N/2, for which the N-node
rule is exact on every product h_k·σ with k < K. c_0 = E[σ]. σ' comes from autograd on the
activation of workers/engine/activations.py, so every activation ntklab knows has a limit. The
convergence is exponential for the analytic activations, slower the larger the variance (σ(√a s)
varies on the scale 1/√a); at relu's kink it would be algebraic, which is why relu keeps its closed form.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from scipy.special import roots_hermitenorm
from torch import Tensor

from workers.engine.activations import hidden_activation

ORDERS = (32, 64, 128, 256, 512, 1024)
CLOSED_FORMS = ("relu", "erf", "identity", "quadratic")


def closed_form(name: str, a: Tensor, b: Tensor, c: Tensor) -> tuple[Tensor, Tensor] | None:
    """(E[σ(u)σ(v)], E[σ'(u)σ'(v)]) in closed form for relu, erf, identity, quadratic; None for the others."""
    if name == "relu":
        norm = torch.sqrt(a * b)
        cos = torch.where(norm > 0, c / torch.where(norm > 0, norm, 1.0), 0.0).clamp(-1.0, 1.0)
        theta = torch.arccos(cos)
        return norm / (2 * math.pi) * (torch.sin(theta) + (math.pi - theta) * cos), (math.pi - theta) / (2 * math.pi)
    if name == "erf":
        pa, pb = 1 + 2 * a, 1 + 2 * b
        return (2 / math.pi) * torch.arcsin(2 * c / torch.sqrt(pa * pb)), (4 / math.pi) / torch.sqrt(pa * pb - 4 * c * c)
    if name == "identity":
        return c, torch.ones_like(c)
    if name == "quadratic":
        return (a * b + 2 * c * c) / 4, c
    return None


def closed_form_mean(name: str, a: Tensor) -> Tensor | None:
    """E[σ(u)], u ~ N(0, a), for the closed-form activations; None for the others."""
    if name == "relu":
        return torch.sqrt(a / (2 * math.pi))
    if name in ("erf", "identity"):
        return torch.zeros_like(a)
    if name == "quadratic":
        return a / 2
    return None


def nodes(order: int, dtype: torch.dtype = torch.float64, device=None) -> tuple[Tensor, Tensor]:
    """Probabilists' Gauss–Hermite nodes s [N] and weights w [N] normalised to Σ w = 1 (E over N(0, 1))."""
    s, w = roots_hermitenorm(order)
    return (torch.as_tensor(s, dtype=dtype, device=device),
            torch.as_tensor(w / math.sqrt(2 * math.pi), dtype=dtype, device=device))


def value_and_derivative(sigma: Callable[[Tensor], Tensor], z: Tensor) -> tuple[Tensor, Tensor]:
    """σ(z) and σ'(z) element-wise, σ' by autograd (σ is element-wise, so ∂Σσ/∂z = σ')."""
    with torch.enable_grad():
        z = z.detach().requires_grad_(True)
        y = sigma(z)
        (dy,) = torch.autograd.grad(y.sum(), z)
    return y.detach(), dy


def weighted_hermite(s: Tensor, w: Tensor, terms: int) -> Tensor:
    """h_k(s_m)·√w_m for k < terms, [terms, N], by h_{k+1} = (s·h_k − √k·h_{k−1})/√(k+1) started at √w:
    orthonormal on the rule (Σ_m h_k h_l w_m = δ_kl for k + l < 2N), so bounded where h_k alone overflows."""
    rows = [w.sqrt(), s * w.sqrt()]
    for k in range(1, terms - 1):
        rows.append((s * rows[k] - math.sqrt(k) * rows[k - 1]) / math.sqrt(k + 1))
    return torch.stack(rows[:terms])


@dataclass(frozen=True)
class Expansion:
    """Hermite coefficients c [M, K] of σ(√a s) and d [M, K] of σ'(√a s) at M variances a, and
    tails [K]: the relative truncation bound with k = 1…K terms kept, max over the points of
    T/E[σ²] and T'/E[σ'²]."""

    c: Tensor
    d: Tensor
    tails: Tensor
    order: int

    @property
    def error(self) -> float:
        return self.tails[self.c.shape[1] - 1].item()

    def truncated(self, tolerance: float) -> Expansion:
        """The fewest leading terms whose bound is ≤ tolerance (all of them when none is)."""
        fits = (self.tails <= tolerance).nonzero()
        terms = int(fits[0]) + 1 if len(fits) else self.c.shape[1]
        return Expansion(self.c[:, :terms], self.d[:, :terms], self.tails, self.order)


def expansion(name: str, variance: Tensor, order: int) -> Expansion:
    """The first N/2 coefficients of σ and σ' at each variance by the N-point rule (N = `order`)."""
    s, w = nodes(order, variance.dtype, variance.device)
    y, dy = value_and_derivative(hidden_activation(name), torch.sqrt(variance.reshape(-1))[:, None] * s)  # [M, N]
    H = weighted_hermite(s, w, order // 2)  # [K, N]
    c, d = (y * w.sqrt()) @ H.T, (dy * w.sqrt()) @ H.T
    return Expansion(c, d, torch.maximum(_tails(c, y, w), _tails(d, dy, w)), order)


def _tails(coefficients: Tensor, values: Tensor, w: Tensor) -> Tensor:
    """[K]: max over points of (E[g²] − Σ_{k'<k} c_k'²)/E[g²] with k = 1…K terms kept, E[g²] by the same rule."""
    second = (values * values * w).sum(-1, keepdim=True)
    tail = (second - torch.cumsum(coefficients * coefficients, dim=-1)).clamp_min(0.0)
    return (tail / second.clamp_min(1e-300)).max(dim=0).values


def choose_expansion(name: str, variance: Tensor, tolerance: float) -> Expansion:
    """The smallest rule of ORDERS whose bound reaches `tolerance`, truncated to the fewest terms; else the largest."""
    for order in ORDERS:
        rule = expansion(name, variance, order)
        if rule.error <= tolerance:
            break
    return rule.truncated(tolerance)


def series(ca: Tensor, cb: Tensor, rho: Tensor) -> Tensor:
    """Σ_k ρ^k ca_k cb_k by Horner's rule; ca, cb [..., K] broadcast with ρ [...] (Mehler's expansion)."""
    total = ca[..., -1] * cb[..., -1]
    for k in range(ca.shape[-1] - 2, -1, -1):
        total = total * rho + ca[..., k] * cb[..., k]
    return total


def layer_expectations(name: str, variance: Tensor, covariance: Tensor, *, tolerance: float) -> tuple[Tensor, Tensor, Tensor, float]:
    """E[σ(u)σ(v)], E[σ'(u)σ'(v)] [n, n, P, P] and E[σ(u)] [n, P] for u, v at the points' variances [n, P]
    and covariances [n, n, P, P]; the last item bounds the relative error (0 for the closed forms)."""
    a, b = variance[:, None, :, None], variance[None, :, None, :]
    exact = closed_form(name, a, b, covariance)
    if exact is not None:
        return *exact, closed_form_mean(name, variance), 0.0
    rule = choose_expansion(name, variance, tolerance)
    n, positions = variance.shape
    c, d = rule.c.reshape(n, positions, -1), rule.d.reshape(n, positions, -1)
    rho = correlation(a, b, covariance)
    ci, cj = c[:, None, :, None, :], c[None, :, None, :, :]
    di, dj = d[:, None, :, None, :], d[None, :, None, :, :]
    return series(ci, cj, rho), series(di, dj, rho), c[..., 0], rule.error


def correlation(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """ρ = c/√(ab) clamped to [−1, 1], 0 where a variance is 0."""
    norm = torch.sqrt(a * b)
    return torch.where(norm > 0, c / torch.where(norm > 0, norm, 1.0), 0.0).clamp(-1.0, 1.0)
