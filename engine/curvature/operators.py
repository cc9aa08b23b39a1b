"""Curvature of the model and of the loss as operators on the flat trainable weights.

w ∈ R^p: the trainable parameters in registration order, flattened and concatenated (or only
those of one parameter group, the others held at their values: the diagonal block ∇²_{w_l}).
Each operator is v [p] ↦ A v [p] for a symmetric A, by torch.func products that never form A
or the Jacobian J = ∂F/∂w [n·O, p]:

    model Hessian   ∇²_w f_a(w; x_i) v   = vjp(grad(w ↦ f_a(w; x_i)), w)(v)   (symmetric: vᵀH = (Hv)ᵀ)
    loss Hessian    ∇²L(w) v             = vjp(grad(L), w)(v)
    Gauss–Newton    G v = (1/n) Jᵀ ∇²ℓ J v:   u = J v (jvp of F), h = ∇²ℓ·u per point
                                              (jvp of ∇ℓ), G v = Jᵀ h / n (vjp of F)
    the rest        R v = (1/n) Σ_i Σ_a g_ia ∇²_w F_ia v = vjp(grad(w ↦ (1/n) Σ g_ia F_ia(w)), w)(v)
                    with g = ∂ℓ/∂F at the current w, held fixed

with L(w) = (1/n) Σ_i ℓ(F(w; x_i), y_i) the training loss of engine/training/loop.py and
F [n, O] the function it reads: the outputs φ(f) for mse (ℓ = ½‖F − y‖², ∇²ℓ = I) and the
logits f for cross-entropy (ℓ = −y·log softmax F, ∇²ℓ = (Σ_a y_a)(diag p − p pᵀ); integer class
labels c [n] are y = e_c, engine/training/losses.py). The chain rule makes the split exact: ∇²L = G + R.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, jvp, vjp, vmap

from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.base import head_of
from ntklab.engine.nets.network import trainable_parameters
from ntklab.engine.training.losses import summed_loss


@dataclass
class Operator:
    """A symmetric operator A on R^dim by its matvec v [dim] ↦ A v (`dtype`, on `device`).

    Called on a batch V [b, dim] it returns the products [b, dim], vmapped; `calls` counts products.
    """

    matvec: Callable[[Tensor], Tensor]
    dim: int
    dtype: torch.dtype
    device: torch.device
    calls: int = 0

    def __call__(self, vectors: Tensor) -> Tensor:
        self.calls += vectors.shape[0]
        with torch.no_grad():
            if vectors.shape[0] == 1:
                return self.matvec(vectors[0].to(self.dtype)).unsqueeze(0)
            return vmap(self.matvec)(vectors.to(self.dtype))


class FlatWeights:
    """The trainable parameters `names` (default: all) of `net` as one flat vector w [p]."""

    def __init__(self, net: nn.Module, names: list[str] | None = None) -> None:
        params = trainable_parameters(net)
        self.names = list(params) if names is None else names
        self.shapes = [params[name].shape for name in self.names]
        self.sizes = [params[name].numel() for name in self.names]
        self.w = torch.cat([params[name].detach().reshape(-1) for name in self.names])

    def unflatten(self, w: Tensor) -> dict[str, Tensor]:
        return {name: t.reshape(shape) for name, t, shape in zip(self.names, torch.split(w, self.sizes), self.shapes)}


def parameter_groups(net: nn.Module) -> dict[str, list[str]]:
    """Trainable parameter names grouped by the module that owns them:
    {"stages.0.layer": ["stages.0.layer.weight", "stages.0.layer.bias"], …, "readout": […]}."""
    groups: dict[str, list[str]] = {}
    for name in trainable_parameters(net):
        groups.setdefault(name.rpartition(".")[0] or name, []).append(name)
    return groups


def loss_reads(loss: str) -> str:
    """The function of the network a loss reads: "outputs" φ(f) for mse, "logits" f for cross-entropy."""
    return "outputs" if loss == "mse" else "logits"


def network_function(net: nn.Module, flat: FlatWeights, x: Tensor, of: str) -> Callable[[Tensor], Tensor]:
    """w [p] ↦ F(w; x) [n, O]: the logits f or the outputs φ(f) (identity head for a module without `head`)."""
    head = head_of(net)

    def function(w: Tensor) -> Tensor:
        logits = functional_call(net, flat.unflatten(w), (x,))
        return apply_head(head, logits) if of == "outputs" else logits

    return function


def _hessian_operator(scalar: Callable[[Tensor], Tensor], w: Tensor) -> Operator:
    """∇²s(w) v as the pullback of ∇s at w (reverse over reverse; ∇²s is symmetric, so vᵀ∇²s = (∇²s v)ᵀ):
    ∇s and its graph are built once, each product (or vmapped batch of them) is one backward pass."""
    _, pullback = vjp(grad(scalar), w)
    return Operator(lambda v: pullback(v)[0], w.numel(), w.dtype, w.device)


def model_hessian_operator(
    net: nn.Module, x_i: Tensor, a: int, *, of: str = "outputs", names: list[str] | None = None
) -> Operator:
    """∇²_w f_a(w; x_i) (of the outputs φ(f) or the logits) for one point x_i [...] (no batch dim)."""
    flat = FlatWeights(net, names)
    function = network_function(net, flat, x_i.unsqueeze(0), of)
    return _hessian_operator(lambda w: function(w)[0, a], flat.w)


def loss_hessian_operator(
    net: nn.Module, x: Tensor, y: Tensor, loss: str, *, names: list[str] | None = None
) -> Operator:
    """∇²L(w) over the points x [n, ...] with targets y [n, O] (or class labels [n])."""
    flat = FlatWeights(net, names)
    function, ell = network_function(net, flat, x, loss_reads(loss)), summed_loss(loss)
    return _hessian_operator(lambda w: ell(function(w), y) / len(x), flat.w)


def gauss_newton_operator(net: nn.Module, x: Tensor, y: Tensor, loss: str) -> Operator:
    """G = (1/n) Jᵀ ∇²ℓ J: one jvp of F, one jvp of ∇ℓ on the [n, O] outputs, one vjp of F."""
    flat = FlatWeights(net)
    function, ell = network_function(net, flat, x, loss_reads(loss)), summed_loss(loss)
    outputs, pullback = vjp(function, flat.w)
    outputs = outputs.detach()
    loss_gradient = grad(lambda out: ell(out, y))

    def matvec(v: Tensor) -> Tensor:
        u = jvp(function, (flat.w,), (v,))[1]
        h = jvp(loss_gradient, (outputs,), (u,))[1]
        return pullback(h / len(x))[0]

    return Operator(matvec, flat.w.numel(), flat.w.dtype, flat.w.device)


def residual_operator(net: nn.Module, x: Tensor, y: Tensor, loss: str) -> Operator:
    """R = ∇²L − G = (1/n) Σ_i Σ_a (∂ℓ/∂F_ia) ∇²_w F_ia, the loss gradient g = ∂ℓ/∂F at the current w held fixed."""
    flat = FlatWeights(net)
    function, ell = network_function(net, flat, x, loss_reads(loss)), summed_loss(loss)
    with torch.no_grad():
        g = grad(lambda out: ell(out, y))(function(flat.w)) / len(x)
    return _hessian_operator(lambda w: (g * function(w)).sum(), flat.w)
