"""The trace of the tangent kernel split by parameter tensor: which weights the kernel is made of.

    tr K = Σ_{i,a} ‖∇_w φ(f)_a(w; x_i)‖² = Σ_g tr K_g,    tr K_g = Σ_{i,a} ‖∂φ(f)_a(w; x_i)/∂w_g‖²

for the trainable parameter tensors w_g (names as in net.named_parameters(), e.g.
"readout.bias"), with K of workers/engine/ntk.py (of the outputs φ(f)). Per-sample Jacobians
[k, O, p] come from torch.func (vmap of jacrev of a functional_call) for chunks of k points
sized to `budget` bytes, so any module works and no n·O·p Jacobian is ever held.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call, jacrev, vmap

from workers.engine.activations import apply_head, head_of

TRACE_BUDGET_BYTES = 64 * 2**20


def kernel_trace_by_parameter(
    net: nn.Module, x: Tensor, params: dict[str, Tensor], *, budget: int = TRACE_BUDGET_BYTES
) -> dict[str, float]:
    """{name: tr K_g} on the points x [n, ...], at the weights `params` (trainable tensors; the rest as in net)."""
    fixed = {name: p.detach() for name, p in params.items()}
    if not fixed:
        return {}
    head = head_of(net)

    def f_point(weights: dict[str, Tensor], x_i: Tensor) -> Tensor:
        return apply_head(head, functional_call(net, weights, (x_i.unsqueeze(0),))).squeeze(0)

    jacobian = vmap(jacrev(f_point), in_dims=(None, 0))
    with torch.no_grad():
        outputs = f_point(fixed, x[0]).numel()
    p = sum(t.numel() for t in fixed.values())
    itemsize = next(iter(fixed.values())).element_size()
    chunk = max(1, budget // max(1, outputs * p * itemsize))
    traces = dict.fromkeys(fixed, 0.0)
    with torch.no_grad():
        for start in range(0, x.shape[0], chunk):
            for name, J in jacobian(fixed, x[start : start + chunk]).items():
                traces[name] += float(J.to(torch.float64).pow(2).sum())
    return traces
