"""The norm of the gradient of each output at each probe point, read off the tangent kernel.

    ‖∇_w f_a(w; x_i)‖ = √K[(i,a),(i,a)]

since K[(i,a),(j,b)] = ∇_w f_a(w; x_i) · ∇_w f_b(w; x_j) (engine/kernels/ntk.py; row
index i·O + a). The gradient is over all trainable parameters.
"""

from __future__ import annotations

from torch import Tensor


def gradient_norms(K: Tensor) -> Tensor:
    """√diag(K) [n·O] for the kernel K [n·O, n·O]: entry i·O + a is ‖∇_w f_a(w; x_i)‖.

    Diagonal entries below zero (rounding, never the exact kernel) count as 0.
    """
    return K.diagonal().clamp(min=0).sqrt()
