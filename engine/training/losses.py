"""The training losses as sums over points, for float targets y [n, O] and for integer class labels c [n].

With F [n, O] the function the loss reads (outputs φ(f) for mse, logits f for cross-entropy):

    mse:            Σ_i ½‖F_i − y_i‖²
    cross_entropy:  Σ_i −Σ_a y_ia log softmax(F_i)_a     targets y [n, C]: one-hot rows or probabilities
                    Σ_i −log softmax(F_i)_{c_i}          labels c [n] (int64), c_i ∈ {0, …, C−1}

The label form is the one-hot form with y_i = e_{c_i}, without the [n, C] one-hot matrix; it picks
each row's entry with a gather, which forward-mode AD differentiates (the Gauss–Newton operator
takes a jvp of ∇ℓ). mse reads float targets only: the spec refuses it on class labels.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor


def summed_loss(loss: str) -> Callable[[Tensor, Tensor], Tensor]:
    """(F [n, O], targets y [n, O] or labels c [n]) ↦ Σ_i ℓ(F_i, y_i), as in the module docstring."""
    return squared_error if loss == "mse" else cross_entropy


def squared_error(outputs: Tensor, targets: Tensor) -> Tensor:
    return 0.5 * (outputs - targets).pow(2).sum()


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    log_p = F.log_softmax(logits, dim=-1)
    if targets.dtype.is_floating_point:
        return -(targets * log_p).sum()
    return -log_p.gather(-1, targets.unsqueeze(-1)).sum()
