"""Lanczos with certified stopping, for many symmetric operators advanced together.

One run builds, with full reorthogonalisation (vectors and coefficients in float64; one
classical Gram–Schmidt pass after the three-term step, a second when the first removed more
than a 1 − 1/√2 share of ‖w‖), the
tridiagonal T_k = Q_kᵀ A Q_k of its operator A on R^dim from a unit start vector q_1:

    w = A q_j − α_j q_j − β_{j−1} q_{j−1},   α_j = q_jᵀ A q_j,   β_j = ‖w‖,   q_{j+1} = w / β_j

The eigenpairs (θ_i, s_i) of T_k (scipy eigh_tridiagonal) give Ritz pairs (θ_i, Q_k s_i) with
residual ‖A Q_k s_i − θ_i Q_k s_i‖ = |β_k · s_i[k]|, so for a symmetric A some eigenvalue λ
has |λ − θ_i| ≤ |β_k s_i[k]| (the bound, on the operator as computed; floored at k·ε₆₄·‖T_k‖,
the rounding of the float64 recurrence, where the last component underflows). A
run stops when

    certified   each of its top-k Ritz values (by |θ|) has bound ≤ tolerance · |θ|  (tolerance > 0)
    invariant   β_k ≤ 10 ε ‖T_k‖: the Krylov space is invariant and the Ritz values are exact
    capped      k = min(steps, dim)

Lanczos sees distinct eigenvalues only: an operator with fewer distinct eigenvalues than
top_k gives fewer values (multiplicities are not resolved). The bound says θ is close to
*an* eigenvalue; that it is the extreme one rests on the start vector not being orthogonal
to its eigenvector (true with probability 1 for a Gaussian start).

`lanczos_many` runs Lanczos on every member of a linear_operator.LinearOperator (one run per
member; a batched operator such as the model Hessian's points × outputs), up to `max_active`
together: each step multiplies all their current vectors in one block of products, finished
runs leave and the next ones (in run order, start vectors drawn from the generator in that
order) join.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.linalg import eigh_tridiagonal
from torch import Tensor

from ntklab.engine.curvature.linear_operator import LinearOperator

BLOCK = 8
"""Basis vectors per allocation: a run holds ⌈k/8⌉·8 float64 vectors of R^dim after k steps, not `steps`."""

DGKS = 1 / np.sqrt(2)
"""A reorthogonalisation pass is repeated when it left less than this fraction of ‖w‖."""


@dataclass
class RitzValues:
    """Top-k Ritz values (signed, |θ| descending), their residual bounds and the operator products spent."""

    values: list[float]
    bounds: list[float]
    matvecs: int


class LanczosRun:
    """One Lanczos recurrence on R^dim, advanced by `advance(A q)` for the caller's product A q."""

    def __init__(self, start: Tensor, steps: int, *, top_k: int, tolerance: float, eps: float) -> None:
        self.steps, self.top_k, self.tolerance = steps, top_k, tolerance
        self.invariant_below = 10 * eps
        self.blocks: list[Tensor] = []
        self.q = start / torch.linalg.norm(start)
        self.alphas: list[float] = []
        self.betas: list[float] = []
        self.residual = 0.0
        self.scale = 0.0
        self.done = False

    @property
    def taken(self) -> int:
        return len(self.alphas)

    def advance(self, product: Tensor) -> None:
        """Record A q_j (float64 [dim]), extend T and decide whether the run is done."""
        self._store(self.q)
        w = product.to(torch.float64, copy=True)  # its own storage: updated in place, kept as q_{j+1}
        alpha = float(w @ self.q)
        self.alphas.append(alpha)
        w.add_(self.q, alpha=-alpha)
        if self.betas:
            w.add_(self._vector(self.taken - 2), alpha=-self.betas[-1])
        beta = self._reorthogonalise(w)
        self.scale = max(self.scale, abs(alpha), beta)
        self.residual = beta
        if beta <= self.invariant_below * self.scale or self.taken == self.steps or self._certified():
            self.done = True
            return
        self.betas.append(beta)
        self.q = w.div_(beta)

    def _store(self, q: Tensor) -> None:
        """Append q_j to the basis, kept as blocks of BLOCK rows allocated as the run grows."""
        j = self.taken
        if j % BLOCK == 0:
            self.blocks.append(q.new_empty(min(BLOCK, self.steps - j), q.numel()))
        self.blocks[-1][j % BLOCK] = q

    def _reorthogonalise(self, w: Tensor) -> float:
        """Remove from w (in place) its components along q_1 … q_k by classical Gram–Schmidt, a second
        pass only when the first shrank ‖w‖ below ‖w‖/√2 (Daniel–Gragg–Kaufman–Stewart: then twice
        is enough); returns ‖w‖. One pass reads the basis twice (Qᵀw, then w − Q·h), so after the
        three-term step has removed α_j q_j + β_{j−1} q_{j−1} a step costs two reads of the basis
        instead of the four of two unconditional passes: on a float64 basis of large dim the
        reads, not the product, are the step's cost."""
        before = float(torch.linalg.norm(w))
        for _ in range(2):
            for block in self._basis():
                w.addmv_(block.T, block @ w, alpha=-1)
            after = float(torch.linalg.norm(w))
            if after >= DGKS * before:
                return after
            before = after
        return after

    def _vector(self, i: int) -> Tensor:
        """q_{i+1}, the basis vector of (0-based) index i."""
        return self.blocks[i // BLOCK][i % BLOCK]

    def _basis(self) -> list[Tensor]:
        """q_1 … q_k as row blocks."""
        return self.blocks[:-1] + [self.blocks[-1][: (self.taken - 1) % BLOCK + 1]]

    def _certified(self) -> bool:
        if self.tolerance <= 0 or self.taken < self.top_k:
            return False
        values, bounds = self._top()
        return bool(np.all(bounds <= self.tolerance * np.abs(values)))

    def _top(self) -> tuple[np.ndarray, np.ndarray]:
        """Top-k Ritz values of T_k by |θ| and their bounds |β_k · s_i[k]|, floored at the float64 rounding k·ε·‖T_k‖."""
        theta, s = eigh_tridiagonal(np.array(self.alphas), np.array(self.betas[: self.taken - 1]))
        order = np.argsort(-np.abs(theta), kind="stable")[: self.top_k]
        rounding = self.taken * np.finfo(np.float64).eps * self.scale
        return theta[order], np.maximum(np.abs(self.residual * s[-1, order]), rounding)

    def result(self) -> RitzValues:
        values, bounds = self._top()
        return RitzValues(values.tolist(), bounds.tolist(), self.taken)


def lanczos_many(
    operator: LinearOperator,
    *,
    steps: int,
    top_k: int,
    tolerance: float,
    generator: torch.Generator | None = None,
    max_active: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[RitzValues]:
    """Top-k Ritz values of each member of `operator` (one run per member), at most `max_active` advancing together.

    Each run takes at most min(steps, dim) products. Start vectors are Gaussian, drawn on the
    CPU from `generator` in run order (run r gets the r-th draw of dim numbers), so the
    values do not depend on max_active. progress(done, planned) follows every block
    product: `planned` counts every product a run may still take and only shrinks.
    """
    runs, dim = operator.members, operator.dim
    cap = min(steps, dim)
    eps = torch.finfo(operator.dtype).eps
    waiting = iter(range(runs))
    active: dict[int, LanczosRun] = {}
    results: dict[int, RitzValues] = {}
    done = 0

    def admit() -> None:
        while len(active) < (max_active or runs):
            r = next(waiting, None)
            if r is None:
                return
            start = torch.randn(dim, generator=generator, dtype=torch.float64).to(operator.device)
            active[r] = LanczosRun(start, cap, top_k=top_k, tolerance=tolerance, eps=eps)

    admit()
    while active:
        ids = list(active)
        products = operator.apply(torch.stack([active[r].q for r in ids]), ids if operator.batch_shape else None)
        for r, product in zip(ids, products):
            active[r].advance(product)
            if active[r].done:
                results[r] = active.pop(r).result()
        done += len(ids)
        admit()
        if progress is not None:
            progress(
                done, done + sum(cap - run.taken for run in active.values()) + cap * (runs - len(results) - len(active))
            )
    return [results[r] for r in range(runs)]


def lanczos_top_eigenvalues(
    operator: LinearOperator,
    *,
    iterations: int = 32,
    top_k: int = 1,
    tolerance: float = 0.0,
    generator: torch.Generator | None = None,
) -> list[float]:
    """Top-k eigenvalues by magnitude (signed, |λ| descending) of one symmetric operator (batch_shape ()).

    At most min(iterations, dim) steps; tolerance 0 runs them all unless the Krylov space
    becomes invariant.
    """
    if operator.batch_shape:
        raise ValueError(f"one operator, not a batch of {operator.members}: index a member or use lanczos_many")
    [ritz] = lanczos_many(operator, steps=iterations, top_k=top_k, tolerance=tolerance, generator=generator)
    return ritz.values
