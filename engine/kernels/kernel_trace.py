"""The trace of the tangent kernel split by parameter tensor: which weights the kernel is made of.

    tr K = Σ_{i,a} ‖∇_w φ(f)_a(w; x_i)‖² = Σ_g tr K_g,    tr K_g = Σ_{i,a} ‖∂φ(f)_a(w; x_i)/∂w_g‖²

for the trainable parameter tensors w_g (names as in net.named_parameters(), e.g.
"readout.bias"), with K of engine/kernels/ntk.py (of the outputs φ(f)). One forward per point
x_i (functional_call at the weights given, so any module works) and one torch.autograd.grad
per output a give the rows ∂φ(f)_a(x_i)/∂w_g; only one point's graph and one p-vector are held
at a time. Plain autograd rather than a vmapped torch.func jacrev: in a fresh worker process
jacrev's first call costs ~1 s, against ~7 ms for this whole pass on a fig2-bottleneck net
(16 points), and on large p both are one backward's work per row.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call

from engine.nets.activations import apply_head, head_of


def kernel_trace_by_parameter(net: nn.Module, x: Tensor, params: dict[str, Tensor]) -> dict[str, float]:
    """{name: tr K_g} on the points x [n, ...], at the weights `params` (trainable tensors; the rest as in net)."""
    leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
    traces = dict.fromkeys(leaves, 0.0)
    if not leaves:
        return traces
    head, names = head_of(net), list(leaves)
    with torch.enable_grad():
        for i in range(x.shape[0]):
            y = apply_head(head, functional_call(net, leaves, (x[i : i + 1],))).reshape(-1)  # [O]
            for a in range(y.numel()):
                rows = torch.autograd.grad(
                    y[a], [leaves[name] for name in names], retain_graph=a + 1 < y.numel(), allow_unused=True
                )
                for name, row in zip(names, rows):
                    if row is not None:
                        traces[name] += float(row.pow(2).sum(dtype=torch.float64))
    return traces
