"""Symmetric Grams of per-(point, output) rows, accumulated in place on the blocks on and above the diagonal.

    add_gram(K, X, O, alpha)                 K += alpha · X Xᵀ                          X [n·O, width]
    add_gram(K, X, O, alpha, point_gram=P)   K += alpha · (P ⊗ 1_O 1_Oᵀ) ⊙ X Xᵀ         P [n, n] symmetric
    mirror(K, O)                             K[J, I] = K[I, J]ᵀ for the blocks I < J

Rows i·O + a belong to point i. The n points are cut into k = ⌈n·O / BLOCK_ROWS⌉ runs of whole
points, and add_gram touches only the k(k+1)/2 blocks I ≤ J: (1 + 1/k)/2 of a full product's
2·(nO)²·width FLOPs, at GEMM speed (torch exposes no syrk). Everything is written into K in place —
addmm_ on a view of K, or one reused [block, block] product scaled by P[I, J] broadcast over the
O×O output pairs (P ⊗ 1 1ᵀ is never formed) — because a fresh [n·O, n·O] tensor per layer costs
page faults and memory passes that rival the products themselves. A sum of such terms (and of
any full symmetric matrices) is completed by one mirror() at the end.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ntklab.planner.kernel_cost_model import BLOCK_ROWS


def add_gram(K: Tensor, X: Tensor, O: int, alpha: float = 1.0, point_gram: Tensor | None = None) -> Tensor:
    """K [n·O, n·O] += alpha·X Xᵀ (⊙ point_gram ⊗ 1 1ᵀ) on the blocks I ≤ J only, in place; returns K."""
    n = X.shape[0] // O
    product = None
    for rows, cols in blocks(n, O):
        target = K[rows, cols]
        if point_gram is None:
            target.addmm_(X[rows], X[cols].T, alpha=alpha)
            continue
        r, c = rows.stop - rows.start, cols.stop - cols.start
        if product is None:
            product = X.new_empty(min(n * O, blocks_rows(O)) ** 2)
        block = torch.mm(X[rows], X[cols].T, out=product[: r * c].view(r, c))
        scale = point_gram[rows.start // O : rows.stop // O, None, cols.start // O : cols.stop // O, None]
        target.view(r // O, O, c // O, O).addcmul_(block.view(r // O, O, c // O, O), scale, value=alpha)
    return K


def mirror(K: Tensor, O: int) -> Tensor:
    """Completes K from its blocks I ≤ J (add_gram's): K[J, I] = K[I, J]ᵀ, in place; returns K."""
    for rows, cols in blocks(K.shape[0] // O, O):
        if rows != cols:
            K[cols, rows] = K[rows, cols].T
    return K


def blocks(n: int, O: int) -> list[tuple[slice, slice]]:
    """The (rows, cols) slices of the blocks on and above the diagonal, each a run of whole points."""
    points = blocks_rows(O) // O
    edges = [slice(start * O, min(n, start + points) * O) for start in range(0, n, points)]
    return [(edges[i], edges[j]) for i in range(len(edges)) for j in range(i, len(edges))]


def blocks_rows(O: int) -> int:
    """Rows of a block: the most whole points within BLOCK_ROWS (at least one point)."""
    return max(1, BLOCK_ROWS // O) * O
