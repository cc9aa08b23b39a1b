"""The outputs' tangent kernel from the logits' kernel, by the chain rule through the head: no pass through the net.

The head φ maps each point's logits f(x_i) ∈ R^O to its outputs, so with D_i = ∂φ/∂f at f(x_i) [O, O]

    ∇_w φ_a(x_i) = Σ_b D_i[a, b] ∇_w f_b(x_i)
    K_φ[(i,a),(j,c)] = Σ_{b,d} D_i[a, b] · K_f[(i,b),(j,d)] · D_j[c, d]        K_φ = D K_f Dᵀ,  D = blockdiag(D_1 … D_n)

(row index i·O + a, as in ntk.py). Element-wise heads (swish, tanh, sigmoid, identity) have
D_i = diag φ'(f(x_i)); softmax has D_i = diag p_i − p_i p_iᵀ. The D_i come from torch.func
(vmap of jacrev of the head on one point); the product costs 2·n²·O³ multiply-adds.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.func import jacrev, vmap

from engine.nets.activations import apply_head


def head_jacobians(head: str, logits: Tensor) -> Tensor:
    """D [n, O, O] with D[i] = ∂φ(f)/∂f at the logits f = logits[i] ([n, O])."""

    def phi(f: Tensor) -> Tensor:
        return apply_head(head, f.unsqueeze(0)).squeeze(0)

    with torch.no_grad():
        return vmap(jacrev(phi))(logits.detach())


def outputs_kernel(K_logits: Tensor, logits: Tensor, head: str) -> Tensor:
    """K_φ = D K_f Dᵀ [n·O, n·O] from the logits' kernel K_f [n·O, n·O] and the logits [n, O] it was measured at."""
    n, O = logits.shape
    D = head_jacobians(head, logits).to(K_logits.dtype)
    K = K_logits.reshape(n, O, n, O)
    left = torch.einsum("iab,ibjd->iajd", D, K)
    return torch.einsum("iajd,jcd->iajc", left, D).reshape(n * O, n * O)
