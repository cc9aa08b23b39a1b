"""E[g(u) g(v)] over a bivariate Gaussian by a polar product rule, doubled until it meets a stated accuracy.

For (u, v) ~ N(0, [[a, c], [c, b]]) with ρ = c/√(ab) = cos ψ, ψ ∈ [0, π], whiten
(u, v) = (√a z₁, √b (ρ z₁ + √(1−ρ²) z₂)) with z ~ N(0, I₂) and go polar, z = r (cos φ, sin φ):

    E[g(u) g(v)] = (1/2π) ∫ dφ ∫₀^∞ r e^{−r²/2} g(r α(φ)) g(r β(φ)) dr,     α = √a cos φ,  β = √b cos(φ − ψ),

φ over one turn. Along a ray u and v are r times constants, and they change sign only where
α = 0 (φ = π/2, 3π/2) or β = 0 (φ = ψ ± π/2), so the turn [π/2, 5π/2) splits into four arcs

    [π/2, π/2 + ψ],  [π/2 + ψ, 3π/2],  [3π/2, 3π/2 + ψ],  [3π/2 + ψ, 5π/2]      (lengths ψ, π − ψ, ψ, π − ψ)

on each of which neither changes sign. A kink of g at 0 (relu, the step relu') therefore sits only at
the arcs' ends: inside an arc the integrand is smooth — for relu a polynomial in r times the Gaussian
and a trigonometric polynomial in φ. An activation that is steep at 0 (tanh(√a z) at a large variance a
is nearly a step) is steep at the same places, where Gauss–Legendre's nodes cluster. So: n Gauss–Legendre
nodes in φ on each arc, and n Gauss–Legendre nodes in r on [0, R] (R = 10: the mass left out,
∫_R^∞ r^k r e^{−r²/2} dr ≈ R^k e^{−R²/2} < 10⁻¹⁷ for k ≤ 4, is below any accuracy asked for), 4n² nodes
per pair. At ρ = ±1 two arcs have length zero and the rule is the one-dimensional one along v = ±√(b/a) u.

Why not the weight's own rule, Gauss–Laguerre in t = r²/2 on the symmetrised g(√(2t)α)g(√(2t)β) +
g(−√(2t)α)g(−√(2t)β)? It is exact for relu, but it converges only as fast as the integrand's growth
off the real t axis allows (erf(√(2t)α) grows like e^{2α²|t|} for t < 0): for erf at a = b = 30 it is at
5e-5 with n = 128 where this rule is at 4e-13 with n = 64 (at a = 1 both reach 1e-14 by n = 32).

Order: n = ORDERS[0], ORDERS[1], … doubled until two successive rules agree within tolerance·scale
for both g = σ and g = σ' (scale: √(E[g(u)²] E[g(v)²]), which bounds |E[g(u)g(v)]|); the finer value is
kept and the difference of the last two is the pair's error estimate (that of the coarser rule, so an
overestimate while the rule converges). Pairs are evaluated in chunks of at most NODES_PER_CHUNK nodes, so
memory stays bounded whatever the number of pairs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch
from scipy.special import roots_legendre
from torch import Tensor

ORDERS = (8, 16, 32, 64, 128, 256)
RADIUS = 10.0
NODES_PER_CHUNK = 1 << 20

Activation = Callable[[Tensor], Tensor]  # z [...] -> (σ(z), σ'(z)) stacked [2, ...]


def expectations(
    g: Activation, a: Tensor, b: Tensor, rho: Tensor, scale: Tensor, *, tolerance: float
) -> tuple[Tensor, Tensor]:
    """E[g(u) g(v)] [2, m] for m pairs with variances a, b and correlations ρ [m], and each pair's error
    estimate [m]: the largest over g of |Q_n − Q_{n/2}| / scale, scale [2, m]."""
    value = torch.zeros(2, len(a), dtype=a.dtype, device=a.device)
    error = torch.full((len(a),), math.inf, dtype=a.dtype, device=a.device)
    active = torch.arange(len(a), device=a.device)
    previous = polar_rule(g, a, b, rho, ORDERS[0])
    for order in ORDERS[1:]:
        current = polar_rule(g, a[active], b[active], rho[active], order)
        difference = ((current - previous).abs() / scale[:, active].clamp_min(1e-300)).amax(0)
        value[:, active], error[active] = current, difference
        unsettled = difference > tolerance
        active, previous = active[unsettled], current[:, unsettled]
        if len(active) == 0:
            break
    return value, error


def polar_rule(g: Activation, a: Tensor, b: Tensor, rho: Tensor, order: int) -> Tensor:
    """The 4n²-node polar rule (n = order) for E[g(u) g(v)] [2, m], in chunks of pairs."""
    chunk = max(1, NODES_PER_CHUNK // (4 * order * order))
    return (
        torch.cat(
            [
                _polar_chunk(g, a[s : s + chunk], b[s : s + chunk], rho[s : s + chunk], order)
                for s in range(0, len(a), chunk)
            ],
            dim=1,
        )
        if len(a)
        else a.new_zeros(2, 0)
    )


def _polar_chunk(g: Activation, a: Tensor, b: Tensor, rho: Tensor, order: int) -> Tensor:
    x, w = _legendre(order, a.dtype, a.device)
    psi = torch.arccos(rho.clamp(-1.0, 1.0))[:, None]  # [m, 1]
    half_pi = math.pi / 2
    starts = torch.cat([half_pi + 0 * psi, half_pi + psi, 3 * half_pi + 0 * psi, 3 * half_pi + psi], dim=1)  # [m, 4]
    lengths = torch.cat([psi, math.pi - psi, psi, math.pi - psi], dim=1)
    phi = starts[..., None] + lengths[..., None] * (x + 1) / 2  # [m, 4, n]
    w_phi = lengths[..., None] * w / 2
    r = RADIUS * (x + 1) / 2  # [n]
    w_r = RADIUS / 2 * w * r * torch.exp(-r * r / 2) / (2 * math.pi)
    alpha = torch.sqrt(a)[:, None, None] * torch.cos(phi)
    beta = torch.sqrt(b)[:, None, None] * torch.cos(phi - psi[..., None])
    product = g(alpha[..., None] * r) * g(beta[..., None] * r)  # [2, m, 4, n, n]
    return torch.einsum("gmanr,man,r->gm", product, w_phi, w_r)


@functools.cache
def _legendre_nodes(order: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes and weights on [−1, 1], polished: scipy's nodes after two Newton steps on P_n, weights
    2/((1 − x²) P_n'(x)²) by the three-term recurrence — scipy's own weights err by ~3e-14 from n = 128 on
    (Σ w x² − 2/3), which the rule would report as a plateau; these are good to a few ulps."""
    x = roots_legendre(order)[0]
    for _ in range(2):
        p, dp = _legendre_and_derivative(order, x)
        x = x - p / dp
    _, dp = _legendre_and_derivative(order, x)
    return x, 2 / ((1 - x * x) * dp * dp)


def _legendre_and_derivative(order: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P_n(x) and P_n'(x) by (k) P_k = (2k − 1) x P_{k−1} − (k − 1) P_{k−2} and P_n' = n (x P_n − P_{n−1})/(x² − 1)."""
    previous, current = np.ones_like(x), x.copy()
    for k in range(2, order + 1):
        previous, current = current, ((2 * k - 1) * x * current - (k - 1) * previous) / k
    return current, order * (x * current - previous) / (x * x - 1)


def _legendre(order: int, dtype: torch.dtype, device) -> tuple[Tensor, Tensor]:
    x, w = _legendre_nodes(order)
    return torch.as_tensor(x, dtype=dtype, device=device), torch.as_tensor(w, dtype=dtype, device=device)
