"""Spectra of a symmetric operator seen only through matrix-vector products: Lanczos, Hutchinson, SLQ.

A: R^p → R^p symmetric, a linear_operator.LinearOperator with one member (a Hessian, its
Gauss–Newton part, …); vectors are flat [p], multiplied a block of rows at a time.

Lanczos (engine/curvature/lanczos.py: full reorthogonalisation in float64) from a unit vector q
builds T_k = Qᵀ A Q, tridiagonal with diagonal α [k] and off-diagonal β [k−1]; it stops early
when the Krylov space is invariant, where T's eigenvalues are exact.

Spectral norm: ‖A‖₂ ≈ max |θ| over the Ritz values θ (eigenvalues of T_k) from a Gaussian
start; the extreme Ritz values converge first and never exceed ‖A‖₂ in magnitude.

Hutchinson (1989): for Rademacher v (entries ±1, independent), E[vᵀAv] = tr A and

    Var[vᵀAv] = 2 (‖A‖_F² − Σ_j A_jj²),

so N probes give tr A ≈ the mean of vᵀAv with standard error s/√N (s the probes' sample
standard deviation).

Stochastic Lanczos quadrature (Ubaru, Chen & Saad 2017): from q = v/‖v‖, the spectral measure
μ_q = Σ_j (q·u_j)² δ(t − λ_j) has the k-node Gauss quadrature of T_k: nodes θ_i (T_k's
eigenvalues) and weights τ_i = (e₁·s_i)² (first components of its unit eigenvectors), exact for
polynomials of degree ≤ 2k − 1: Σ_i τ_i θ_i^r = qᵀ A^r q. Averaged over N Rademacher probes,

    φ(t) = (1/N) Σ_l Σ_i τ_i^(l) δ(t − θ_i^(l))  ≈  (1/p) Σ_j δ(t − λ_j),

the spectral density normalised to mass 1; its r-th moment is a Hutchinson estimate of
tr(A^r)/p (variance as above with A^r, divided by p²N), and the first Lanczos coefficient of
each probe is its Hutchinson sample: vᵀAv = p·α₁. φ is reported as a Gaussian-smoothed
density on a grid and as a histogram of the node masses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.linalg import eigh_tridiagonal
from torch import Tensor

from ntklab.engine.curvature.lanczos import LanczosRun, lanczos_top_eigenvalues
from ntklab.engine.curvature.linear_operator import LinearOperator


def lanczos_tridiagonals(operator: LinearOperator, starts: Tensor, steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """α [k] and β [k−1] of T_k = Qᵀ A Q from each float64 row of starts [N, p], k ≤ min(steps, p).

    The N recurrences (engine/curvature/lanczos.py's LanczosRun, run to the invariant space or
    `steps`) advance together, one block of products per step over the runs not yet done, on
    starts' device. Memory: the bases, N·min(steps, p)·p float64.
    """
    eps = torch.finfo(operator.dtype).eps
    runs = [LanczosRun(start, min(steps, starts.shape[1]), top_k=1, tolerance=0.0, eps=eps) for start in starts]
    active = runs
    while active:
        products = operator.apply(torch.stack([run.q for run in active]))
        for run, product in zip(active, products):
            run.advance(product)
        active = [run for run in active if not run.done]
    return [(np.array(run.alphas), np.array(run.betas)) for run in runs]


def gauss_quadrature(alphas: np.ndarray, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes θ [k] (T's eigenvalues, ascending) and weights τ [k] (squared first components of its eigenvectors)."""
    if len(alphas) == 1:
        return alphas.copy(), np.ones(1)
    nodes, vectors = eigh_tridiagonal(alphas, betas)
    return nodes, vectors[0] ** 2


def spectral_norm(operator: LinearOperator, *, steps: int, tolerance: float, generator: torch.Generator) -> float:
    """‖A‖₂ ≈ max |θ| by Lanczos from a Gaussian start (drawn on the CPU from `generator`), at most `steps`
    steps, stopping once the top Ritz value's residual bound is ≤ tolerance·|θ| (engine/curvature/lanczos.py)."""
    [top] = lanczos_top_eigenvalues(operator, iterations=steps, tolerance=tolerance, generator=generator)
    return abs(top)


@dataclass
class SpectralQuadrature:
    """SLQ and Hutchinson from N Rademacher probes of dimension p.

    samples [N]: vᵀAv of each probe; nodes[l], weights[l]: probe l's Gauss quadrature (k_l ≤ steps
    nodes, weights summing to 1).
    """

    dim: int
    samples: list[float]
    nodes: list[list[float]]
    weights: list[list[float]]

    def trace(self) -> float:
        """Hutchinson's estimate of tr A: the mean of vᵀAv."""
        return float(np.mean(self.samples))

    def trace_standard_error(self) -> float | None:
        """s/√N with s the samples' standard deviation; None for one probe."""
        if len(self.samples) < 2:
            return None
        return float(np.std(self.samples, ddof=1) / np.sqrt(len(self.samples)))

    def moments(self, orders: int = 4) -> list[float]:
        """∫ t^r φ(t) dt for r = 1…orders: estimates of tr(A^r)/p."""
        return [
            float(np.mean([np.dot(w, np.asarray(t) ** r) for t, w in zip(self.nodes, self.weights)]))
            for r in range(1, orders + 1)
        ]

    def density(self, points: int, bandwidth: float) -> tuple[list[float], list[float], float]:
        """grid [points], φ smoothed by a Gaussian of width σ [points], and σ = bandwidth · max(spread of the
        nodes, their largest |value|), or bandwidth itself when every node is 0.

        The grid spans the nodes ± 4σ, so the smoothed density integrates to 1 up to the trapezoid rule.
        """
        nodes, masses = self._flat()
        low, high = float(nodes.min()), float(nodes.max())
        scale = max(high - low, float(np.abs(nodes).max()))
        sigma = bandwidth * (scale if scale > 0 else 1.0)
        grid = np.linspace(low - 4 * sigma, high + 4 * sigma, points)
        gaussians = np.exp(-0.5 * ((grid[:, None] - nodes[None, :]) / sigma) ** 2) / (sigma * np.sqrt(2 * np.pi))
        return grid.tolist(), (gaussians @ masses).tolist(), sigma

    def histogram(self, bins: int) -> tuple[list[float], list[float]]:
        """Bin edges [bins+1] over the nodes' range and the mass of φ in each bin [bins] (summing to 1)."""
        nodes, masses = self._flat()
        mass, edges = np.histogram(nodes, bins=bins, weights=masses)
        return edges.tolist(), mass.tolist()

    def _flat(self) -> tuple[np.ndarray, np.ndarray]:
        nodes = np.concatenate([np.asarray(t) for t in self.nodes])
        masses = np.concatenate([np.asarray(w) for w in self.weights]) / len(self.nodes)
        return nodes, masses


def stochastic_lanczos_quadrature(
    operator: LinearOperator, *, probes: int, steps: int, batch: int, generator: torch.Generator
) -> SpectralQuadrature:
    """`probes` Rademacher vectors (drawn on the CPU from `generator`), `steps` Lanczos steps from each, `batch` at a time;
    steps=1 is Hutchinson's trace alone (one product per probe)."""
    dim = operator.dim
    samples, nodes, weights = [], [], []
    for first in range(0, probes, batch):
        size = min(batch, probes - first)
        v = torch.randint(0, 2, (size, dim), generator=generator, dtype=torch.float64) * 2 - 1
        for alphas, betas in lanczos_tridiagonals(operator, (v / np.sqrt(dim)).to(operator.device), steps):
            samples.append(dim * float(alphas[0]))
            theta, tau = gauss_quadrature(alphas, betas)
            nodes.append(theta.tolist())
            weights.append(tau.tolist())
    return SpectralQuadrature(dim, samples, nodes, weights)
