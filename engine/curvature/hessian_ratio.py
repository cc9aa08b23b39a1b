"""The model Hessian measured against the gradient: small means near-linear.

Proposition 2.2 of the paper bounds the change of the tangent kernel over a ball of
radius R around w by O(‖H‖·R); for a wide network ‖∇_w f‖ stays Θ(1) while ‖H‖ =
Õ(1/√m) (§3.3), so the model is near-linear where the ratio is small. Per probe point i
and output a, from the Hessian norms and gradient norms of the same (i, a),

    ratio = max_{i,a} ‖∇²_w f_a(w; x_i)‖₂ / ‖∇_w f_a(w; x_i)‖^power

power 1 is that ratio; power 2 divides by the kernel's diagonal K[(i,a),(i,a)] =
‖∇_w f_a(x_i)‖², which a reparameterization rescaling every layer by the same factor
leaves unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence


def hessian_grad_ratio(
    hessian_norms: Sequence[Sequence[float]], grad_norms: Sequence[Sequence[float]], *, power: int = 1
) -> float | None:
    """max over points i and outputs a of hessian_norms[i][a] / grad_norms[i][a]**power, both [P][O].

    Pairs with a zero gradient are left out (the ratio is undefined there); None when every
    gradient is zero (e.g. all-zero inputs to a network without biases).
    """
    ratios = [h / g**power for row_h, row_g in zip(hessian_norms, grad_norms) for h, g in zip(row_h, row_g) if g > 0]
    return max(ratios) if ratios else None
