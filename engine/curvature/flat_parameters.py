"""The one flat view of a network's parameters that every curvature operator acts on.

w ∈ R^p: the trainable parameters `names` (default: all, in registration order) flattened and
concatenated; the others, for a subset (one parameter group: the diagonal block ∇²_{w_l}),
keep their values. The network is then a function of w,

    F(w; x) [n, O] = φ(f(w; x)) (of="outputs", φ the network's head, identity for a module
                     without one) or f(w; x) (of="logits"), over points x [n, ...].
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call

from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.base import head_of
from ntklab.engine.nets.network import trainable_parameters


class FlatParameters:
    """w [p] of `net` (the parameters `names`, default every trainable one) at their current values."""

    def __init__(self, net: nn.Module, names: list[str] | None = None) -> None:
        params = trainable_parameters(net)
        self.net = net
        self.names = list(params) if names is None else names
        self.shapes = [params[name].shape for name in self.names]
        self.sizes = [params[name].numel() for name in self.names]
        self.w = torch.cat([params[name].detach().reshape(-1) for name in self.names])

    @property
    def dim(self) -> int:
        return self.w.numel()

    def unflatten(self, w: Tensor) -> dict[str, Tensor]:
        return {name: t.reshape(shape) for name, t, shape in zip(self.names, torch.split(w, self.sizes), self.shapes)}

    def outputs(self, w: Tensor, x: Tensor, of: str) -> Tensor:
        """F(w; x) [n, O] for points x [n, ...]: the outputs φ(f) or the logits f."""
        logits = functional_call(self.net, self.unflatten(w), (x,))
        return apply_head(head_of(self.net), logits) if of == "outputs" else logits

    def output(self, w: Tensor, x_i: Tensor, u: Tensor, of: str) -> Tensor:
        """⟨u, F(w; x_i)⟩, a scalar, for one point x_i [...] (no batch dimension) and u [O]; u = e_a picks F_a."""
        return self.outputs(w, x_i.unsqueeze(0), of).reshape(-1) @ u

    def output_dim(self, x: Tensor) -> int:
        """O, from one forward pass of the first point."""
        with torch.no_grad():
            return self.outputs(self.w, x[:1], "logits").numel()


def parameter_groups(net: nn.Module) -> dict[str, list[str]]:
    """Trainable parameter names grouped by the module that owns them:
    {"stages.0.layer": ["stages.0.layer.weight", "stages.0.layer.bias"], …, "readout": […]}."""
    groups: dict[str, list[str]] = {}
    for name in trainable_parameters(net):
        groups.setdefault(name.rpartition(".")[0] or name, []).append(name)
    return groups
