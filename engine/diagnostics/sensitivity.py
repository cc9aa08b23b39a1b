"""Layer sensitivity: how strongly the output depends on any one hidden unit.

For hidden layer l with representation α^(l)(x) (post-activation; for a resnet the
residual stream after the block), the paper's condition (b) of Theorem 3.1 asks that
‖∂f/∂α^(l)‖_∞ be Õ(1/√m): no dominant neuron. Reported per layer:

    linf = max_{i,a} ‖∂f_a(x_i)/∂α^(l)‖_∞,     l2 = max_{i,a} ‖∂f_a(x_i)/∂α^(l)‖₂

(the total derivative through everything downstream of α^(l); conv maps are flattened).
One forward and O backward passes. A TangentNetwork names its hidden layers
(forward_with_hidden); for any other module they are the outputs of its parameter-free leaf
modules (the activations: nn.Tanh, nn.ReLU, …) called between its first and its last module
with parameters, in call order: nn.Sequential(Linear, Tanh, Linear, Tanh, Linear) has two.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.base import TangentNetwork, head_of, leaf_representations


@dataclass
class LayerSensitivity:
    layer: int
    linf: float
    l2: float


def layer_sensitivity(net: nn.Module, x: Tensor, *, of: str = "outputs") -> list[LayerSensitivity]:
    """Per hidden layer (1-based), the largest ∞- and 2-norms of ∂f_a(x_i)/∂α^(l) over points i and outputs a."""
    with torch.enable_grad():
        logits, hidden = hidden_representations(net, x)
        if not hidden:
            return []
        y = apply_head(head_of(net), logits) if of == "outputs" else logits
        linf = torch.zeros(len(hidden), dtype=torch.float64)
        l2 = torch.zeros(len(hidden), dtype=torch.float64)
        for a in range(y.shape[1]):
            grads = torch.autograd.grad(y[:, a].sum(), hidden, retain_graph=a < y.shape[1] - 1, allow_unused=True)
            for l, g in enumerate(grads):
                if g is None:
                    continue
                per_point = g.detach().flatten(1).to(torch.float64)
                linf[l] = max(linf[l], per_point.abs().amax())
                l2[l] = max(l2[l], torch.linalg.norm(per_point, dim=1).amax())
    return [LayerSensitivity(l + 1, float(linf[l]), float(l2[l])) for l in range(len(hidden))]


def hidden_representations(net: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """(logits [n, O], [α^(1), …, α^(L)]) from one forward pass with grad: a TangentNetwork's forward_with_hidden,
    else the outputs of the module's parameter-free leaf modules (nets.base.leaf_representations)."""
    return net.forward_with_hidden(x) if isinstance(net, TangentNetwork) else leaf_representations(net, x)
