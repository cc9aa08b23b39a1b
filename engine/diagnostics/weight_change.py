"""How far training moved the weights: the ℓ2 and ℓ∞ norms of w_t − w₀.

    weight_change(w_t, w₀) = (‖w_t − w₀‖₂, ‖w_t − w₀‖_∞)

over the flat vector of all trainable parameters (every tensor flattened and
concatenated, p numbers). The values are the raw parameters, before each layer's
parameterization multiplier (docs/diagnostics.md, "Weights format"). Under the NTK
parameterization the paper predicts ‖w* − w₀‖₂ = O(1) and ‖w* − w₀‖_∞ = O(1/√m) in the
width m.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor


def weight_change(w: Mapping[str, Tensor], w0: Mapping[str, Tensor]) -> tuple[float, float]:
    """(‖w − w₀‖₂, ‖w − w₀‖_∞), in the weights' dtype.

    w and w0 map each trainable parameter's name to a tensor of the same shape; the norms
    are over all of them flattened into one vector [p].
    """
    delta = torch.cat([(w[name].detach() - w0[name]).flatten() for name in w])
    return torch.linalg.vector_norm(delta).item(), torch.linalg.vector_norm(delta, ord=float("inf")).item()
