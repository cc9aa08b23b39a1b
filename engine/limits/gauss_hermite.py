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

Every other activation (tanh, gelu, softplus, swish, sigmoid) by quadrature, to a relative accuracy
`tolerance` at every pair — relative to √(E[g(u)²] E[g(v)²]) ≥ |E[g(u) g(v)]|, for g = σ and g = σ' —
in two parts (`quadrature` runs them for any activation, relu and erf included, which is how the tests
check them against the closed forms).

Mehler's series. With h_k = He_k/√k! the orthonormal (probabilists') Hermite polynomials and s ~ N(0, 1),

    E[g(u) g(v)] = Σ_k ρ^k · c_k(a) · c_k(b),      c_k(a) = E[g(√a s) h_k(s)],

so a layer costs one 1-D Gauss–Hermite rule per point and variance plus K terms per pair, instead of a
2-D rule per pair — what keeps conv nets' [n, n, P, P] maps affordable. The c_k, k < K ≤ min(N/4, 512), come from
the N-node rule (scipy.special.roots_hermitenorm; numpy's hermite_e.hermegauss overflows past N = 256),
exact on h_j·h_k for j + k < 2N, and are checked against the N/2-node rule: δ_k = c_k^N − c_k^{N/2}
estimates their error (the coarser rule's, so an overestimate while the rule converges; it is largest
at high k, where the aliasing is). Keeping K terms errs by at most |ρ|^K √(T(a) T(b)),
T(a) = E[g(√a s)²] − Σ_{k<K} c_k(a)² the tail (Cauchy–Schwarz), and the coefficients' errors, split at
h = ⌈K/2⌉ so that the late ones keep their factor ρ^k ≤ |ρ|^h, by at most (ε₀(a) + ε₀(b)) + |ρ|^h (ε₁(a) + ε₁(b))
with ε₀² = Σ_{k<h} δ_k²/E[g²], ε₁² = Σ_{h≤k<K} δ_k²/E[g²]. So a pair's relative error is at most

    B = |ρ|^K √(τ(a) τ(b)) + ε₀(a) + ε₀(b) + |ρ|^h (ε₁(a) + ε₁(b)),       τ = T/E[g²]   (E[g²] by the same rule),

largest at ρ = ±1, where it is at most the larger of the two points' τ + 2ε₀ + 2ε₁. N of ORDERS and K
are the smallest for which τ + 2ε₀ + 2ε₁ ≤ tolerance at every point for σ and σ' — so B ≤ tolerance at
every pair — else the largest rule (4096 nodes) with all 512 terms. The convergence is exponential for the
analytic activations, slower the larger the variance (g(√a s) varies on the scale 1/√a); across a kink
(relu, or its step σ') it is algebraic, and ε and τ stay large.

The polar rule. The pairs whose B exceeds the tolerance — near ρ = ±1 when the largest rule is not
enough, every pair of a kinked σ — get a genuinely two-dimensional rule instead (engine/limits/
gaussian_quadrature.py: polar coordinates split where u or v changes sign, Gauss–Legendre on each piece,
doubled until two successive rules agree within the tolerance), and each keeps the smaller of the two
estimates. σ' comes from autograd on the activation of engine/nets/activations.py, so every activation
ntklab knows has a limit; E[σ] = c_0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from scipy.special import roots_hermitenorm
from torch import Tensor

from ntklab.engine.limits import gaussian_quadrature
from ntklab.engine.nets.activations import hidden_activation

ORDERS = (32, 64, 128, 256, 512, 1024, 2048, 4096)
MAX_TERMS = 512


MAX_POLAR_PAIRS = 2048
"""Pairs per layer map given to the polar rule (≈ 10 ms each at its largest order on one core): its
cost is bounded by ~20 s per map whatever the variances; the pairs beyond keep Mehler's value and
bound, so the reported error (kernel_inf_quadrature_error) stays true but may exceed the tolerance."""


def closed_form(name: str, a: Tensor, b: Tensor, c: Tensor) -> tuple[Tensor, Tensor] | None:
    """(E[σ(u)σ(v)], E[σ'(u)σ'(v)]) in closed form for relu, erf, identity, quadratic; None for the others."""
    if name == "relu":
        return _arc_cosine(a, b, c)
    if name == "erf":
        pa, pb = 1 + 2 * a, 1 + 2 * b
        return (2 / math.pi) * torch.arcsin(2 * c / torch.sqrt(pa * pb)), (4 / math.pi) / torch.sqrt(
            pa * pb - 4 * c * c
        )
    if name == "identity":
        return c, torch.ones_like(c)
    if name == "quadratic":
        return (a * b + 2 * c * c) / 4, c
    return None


def _arc_cosine(a: Tensor, b: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """relu's closed forms with cos θ = c/√(ab) (0 where a variance is 0), in place on c-sized temporaries
    (a layer map's largest tensors); √(ab) as one rounded product, so that ρ = 1 exactly on the diagonal."""
    norm = (a * b).sqrt_()
    cos = torch.div(c, norm).nan_to_num_(0.0, 0.0, 0.0).clamp_(-1.0, 1.0)  # 0/0 and c/0 -> 0
    theta = torch.arccos(cos)
    E = torch.sin(theta)
    remaining = theta.neg_().add_(math.pi)  # π − θ
    return E.addcmul_(remaining, cos).mul_(norm).mul_(1 / (2 * math.pi)), remaining.mul_(1 / (2 * math.pi))


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
    return (
        torch.as_tensor(s, dtype=dtype, device=device),
        torch.as_tensor(w / math.sqrt(2 * math.pi), dtype=dtype, device=device),
    )


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
    """Mehler's expansion at M points of any shape [...] (variances a), for g = σ, σ' (the axis of size 2):
    coefficients c [..., 2, K] of g(√a s), E[g²] [..., 2], the relative tail τ [..., 2] and coefficient errors
    ε₀ (k < ⌈K/2⌉) and ε₁ (⌈K/2⌉ ≤ k < K) [..., 2], by the rule of `order` nodes."""

    coefficients: Tensor
    second: Tensor
    tail: Tensor
    error: Tensor
    late_error: Tensor
    order: int

    @property
    def terms(self) -> int:
        return self.coefficients.shape[-1]

    @property
    def bound(self) -> float:
        """The largest relative error bound at ρ = ±1: max over points and g of τ + 2ε₀ + 2ε₁."""
        return (self.tail + 2 * self.error + 2 * self.late_error).max().item()

    def at(self, index) -> Expansion:
        """The expansion at the points `index` selects (it indexes the leading point dimensions)."""
        return Expansion(
            self.coefficients[index],
            self.second[index],
            self.tail[index],
            self.error[index],
            self.late_error[index],
            self.order,
        )


def activation_and_derivative(name: str) -> Callable[[Tensor], Tensor]:
    """z ↦ (σ(z), σ'(z)) stacked [2, ...]."""
    sigma = hidden_activation(name)
    return lambda z: torch.stack(value_and_derivative(sigma, z))


def coefficients(name: str, variance: Tensor, order: int) -> tuple[Tensor, Tensor]:
    """c_k of σ(√a s) and σ'(√a s) for k < min(N/2, MAX_TERMS) by the N-node rule (N = `order`) [M, 2, ·], and
    E[g²] [M, 2] by the same rule, at the M = variance.numel() variances."""
    s, w = nodes(order, variance.dtype, variance.device)
    g = activation_and_derivative(name)(torch.sqrt(variance.reshape(-1))[:, None] * s)  # [2, M, N]
    H = weighted_hermite(s, w, min(order // 2, MAX_TERMS))  # [K, N]
    return ((g * w.sqrt()) @ H.T).transpose(0, 1), (g * g * w).sum(-1).T


def choose_expansion(name: str, variance: Tensor, tolerance: float) -> Expansion:
    """At each variance [...]: the smallest rule of ORDERS (checked against the one before) whose bound at ρ = ±1
    reaches `tolerance`, truncated to the fewest terms that do; else the largest with all its terms."""
    coarse, _ = coefficients(name, variance, ORDERS[0])
    for order in ORDERS[1:]:
        fine, second = coefficients(name, variance, order)
        rule = _fewest_terms(fine[..., : coarse.shape[-1]], coarse, second, tolerance, order)
        if rule.bound <= tolerance:
            break
        coarse = fine
    points = variance.shape
    return Expansion(
        rule.coefficients.reshape(*points, 2, -1),
        *(t.reshape(*points, 2) for t in (rule.second, rule.tail, rule.error, rule.late_error)),
        rule.order,
    )


def _fewest_terms(fine: Tensor, coarse: Tensor, second: Tensor, tolerance: float, order: int) -> Expansion:
    """fine, coarse [M, 2, K] the same coefficients by two rules: the fewest leading terms whose τ + 2ε₀ + 2ε₁ ≤
    tolerance at every point (all K when none do), relative to E[g²] [M, 2]; index j below keeps j + 1 terms."""
    norm = second.clamp_min(1e-300)[..., None]
    tails = (second[..., None] - torch.cumsum(fine * fine, dim=-1)).clamp_min(0.0) / norm  # [M, 2, K]
    squares = torch.cumsum((fine - coarse) ** 2, dim=-1) / norm
    half = torch.arange(1, fine.shape[-1] + 1, device=fine.device).add(1).div(2, rounding_mode="floor") - 1  # ⌈j/2⌉ − 1
    early, late = squares[..., half].sqrt(), (squares - squares[..., half]).clamp_min(0.0).sqrt()
    fits = ((tails + 2 * early + 2 * late).flatten(0, 1).amax(0) <= tolerance).nonzero()
    j = int(fits[0]) if len(fits) else fine.shape[-1] - 1
    return Expansion(fine[..., : j + 1], second, tails[..., j], early[..., j], late[..., j], order)


def series(ca: Tensor, cb: Tensor, rho: Tensor) -> Tensor:
    """Σ_k ρ^k ca_k cb_k by Horner's rule; ca, cb [..., K] broadcast with ρ [...] (Mehler's expansion)."""
    total = ca[..., -1] * cb[..., -1]
    for k in range(ca.shape[-1] - 2, -1, -1):
        total = total * rho + ca[..., k] * cb[..., k]
    return total


def mehler_bound(left: Expansion, right: Expansion, rho: Tensor) -> Tensor:
    """B = |ρ|^K √(τ(a) τ(b)) + ε₀(a) + ε₀(b) + |ρ|^⌈K/2⌉ (ε₁(a) + ε₁(b)), the larger for σ and σ' [...], for
    expansions at the pairs' two points."""
    decay, late = rho.abs() ** left.terms, rho.abs() ** ((left.terms + 1) // 2)
    return torch.maximum(
        *(
            decay * torch.sqrt(left.tail[..., g] * right.tail[..., g])
            + left.error[..., g]
            + right.error[..., g]
            + late * (left.late_error[..., g] + right.late_error[..., g])
            for g in (0, 1)
        )
    )


def pair_expectations(
    name: str, left: Expansion, right: Expansion, a: Tensor, b: Tensor, rho: Tensor, tolerance: float
) -> tuple[Tensor, Tensor]:
    """(E[σσ], E[σ'σ']) [..., 2] and each pair's relative error bound [...] for pairs of variances a, b and
    correlations ρ broadcast to one shape [...], left and right the expansions at their points (broadcast
    likewise): Mehler's series where its bound B ≤ tolerance, the polar rule where not."""
    values = series(left.coefficients, right.coefficients, rho[..., None])
    bound = mehler_bound(left, right, rho)
    hard = _hardest(bound, tolerance)
    if len(hard[0]) == 0:
        return values, bound
    shape = bound.shape
    scale = torch.sqrt(left.second.expand(*shape, 2)[hard] * right.second.expand(*shape, 2)[hard])  # [m, 2]
    polar, error = gaussian_quadrature.expectations(
        activation_and_derivative(name),
        a.expand(shape)[hard],
        b.expand(shape)[hard],
        rho[hard],
        scale.T,
        tolerance=tolerance,
    )
    better = error < bound[hard]
    values[hard] = torch.where(better[:, None], polar.T, values[hard])
    bound[hard] = torch.minimum(error, bound[hard])
    return values, bound


def _hardest(bound: Tensor, tolerance: float) -> tuple[Tensor, ...]:
    """Indices of the pairs whose bound exceeds the tolerance, the MAX_POLAR_PAIRS largest bounds first
    (the rest keep Mehler's value and its bound, which the caller reports)."""
    flat = bound.reshape(-1)
    over = (flat > tolerance).nonzero().squeeze(-1)
    if len(over) > MAX_POLAR_PAIRS:
        over = over[torch.topk(flat[over], MAX_POLAR_PAIRS).indices]
    return torch.unravel_index(over, bound.shape)


def quadrature(
    name: str, variance: Tensor, covariance: Tensor, *, tolerance: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """E[σ(u)σ(v)], E[σ'(u)σ'(v)] [n, n, P, P], E[σ(u)] [n, P] and each pair's relative error bound [n, n, P, P]
    by quadrature alone, for the points' variances [n, P] and covariances [n, n, P, P]."""
    a, b = variance[:, None, :, None], variance[None, :, None, :]
    rule = choose_expansion(name, variance, tolerance)
    left, right = rule.at((slice(None), None, slice(None), None)), rule.at((None, slice(None), None, slice(None)))
    values, bound = pair_expectations(name, left, right, a, b, correlation(a, b, covariance), tolerance)
    return values[..., 0], values[..., 1], rule.coefficients[..., 0, 0], bound


def layer_expectations(
    name: str, variance: Tensor, covariance: Tensor, *, tolerance: float
) -> tuple[Tensor, Tensor, Tensor, float]:
    """E[σ(u)σ(v)], E[σ'(u)σ'(v)] [n, n, P, P] and E[σ(u)] [n, P] for u, v at the points' variances [n, P]
    and covariances [n, n, P, P]; the last item bounds the relative error (0 for the closed forms)."""
    a, b = variance[:, None, :, None], variance[None, :, None, :]
    exact = closed_form(name, a, b, covariance)
    if exact is not None:
        return *exact, closed_form_mean(name, variance), 0.0
    E, Edot, mean, bound = quadrature(name, variance, covariance, tolerance=tolerance)
    return E, Edot, mean, bound.max().item()


def correlation(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """ρ = c/√(ab) clamped to [−1, 1], 0 where a variance is 0."""
    norm = torch.sqrt(a * b)
    return torch.where(norm > 0, c / torch.where(norm > 0, norm, 1.0), 0.0).clamp(-1.0, 1.0)
