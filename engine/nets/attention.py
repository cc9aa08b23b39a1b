"""Multi-head softmax self-attention over a token sequence, from ScaledLinear projections.

For tokens h [n, T, d], width m = heads · d_head, each projection a ScaledLinear over the last axis:

    q = Q(h), k = K(h), v = V(h)                       [n, T, m] → per head [n, heads, T, d_head]
    s_{tu} = q_t · k_u / √d_head                       scores [n, heads, T, T]
    a_t = Σ_u softmax_u(s_t)_u v_u                     [n, heads, T, d_head] → concatenated [n, T, m]
    out = O(a)                                         [n, T, d]

Scaling: the standard 1/√d_head. Under every parameterization q and k have O(1) entries at init,
so q·k is a sum of d_head terms of size O(1) and 1/√d_head keeps the scores O(1) at any width:
the softmax is neither uniform nor saturated at init. (1/d_head, the μP choice, makes the
scores vanish as d_head grows and attention average uniformly at init.) The consequence for
linearity — a fixed number heads·T² of scores, each a Θ(1)-gradient function of the weights fed
through the softmax — is measured in tests/engine/test_graph_theory.py and docs/models.md.
Plain tensor operations, so forward-over-reverse (Hessian-vector products) and vmap apply.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ntklab.engine.nets.layers import ScaledLinear


class SelfAttention(nn.Module):
    """[n, T, d] → [n, T, d]: softmax(q kᵀ/√d_head) v per head, concatenated, then the output projection."""

    def __init__(self, query: ScaledLinear, key: ScaledLinear, value: ScaledLinear, out: ScaledLinear, *, heads: int):
        super().__init__()
        self.query, self.key, self.value, self.out = query, key, value, out
        self.heads = heads

    def forward(self, h: Tensor) -> Tensor:
        q, k, v = (self._split(projection(h)) for projection in (self.query, self.key, self.value))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        mixed = torch.softmax(scores, dim=-1) @ v
        n, _, tokens, _ = mixed.shape
        return self.out(mixed.transpose(1, 2).reshape(n, tokens, -1))

    def _split(self, z: Tensor) -> Tensor:
        """[n, T, m] → [n, heads, T, m / heads]."""
        n, tokens, width = z.shape
        return z.reshape(n, tokens, self.heads, width // self.heads).transpose(1, 2)

    def extra_repr(self) -> str:
        return f"heads={self.heads}"
