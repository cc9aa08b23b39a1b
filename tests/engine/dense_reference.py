"""Dense references for the engine's iterative methods: the model Hessian by double-backward autograd."""

from __future__ import annotations

import torch
from torch.func import functional_call

from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import trainable_parameters


def dense_hessian(net, x_i: torch.Tensor) -> torch.Tensor:
    """∇²_w f(w; x_i) [p, p] of the single output by reverse-over-reverse autograd (one double-backward per row).

    Not torch.func.hessian = jacfwd(jacrev(f)): in torch 2.13 a second derivative taken through
    jacrev's vmapped vjp of F.layer_norm with an affine weight is wrong (jacrev(jacrev(f)) too;
    both are asymmetric on the pre-LN transformer), while torch.autograd's, jacfwd(grad(f)) and
    jvp(grad(f)) — the engine's Hessian-vector product — agree with finite differences.
    """
    params = trainable_parameters(net)
    names, shapes, sizes = list(params), [p.shape for p in params.values()], [p.numel() for p in params.values()]
    w = torch.cat([p.detach().reshape(-1) for p in params.values()])

    def f(w):
        unflat = {k: t.reshape(s) for k, t, s in zip(names, torch.split(w, sizes), shapes)}
        return apply_head(net.head, functional_call(net, unflat, (x_i.unsqueeze(0),)))[0, 0]

    return torch.autograd.functional.hessian(f, w)
