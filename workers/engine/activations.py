"""Element-wise activations σ of the hidden layers and output heads φ of the network.

Hidden: α = σ(z) element-wise. Head: the network's outputs are φ(f(w; x)) ∈ R^O where
f are the logits; every head is element-wise except softmax, which normalises over
the last dimension. All maps take and return tensors of the same shape. A module that is not
one of ntklab's networks has no head attribute: its head is the identity (head_of).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

HIDDEN_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "gelu": F.gelu,
    "softplus": F.softplus,
    "swish": F.silu,
    "sigmoid": torch.sigmoid,
    "erf": torch.erf,
    "quadratic": lambda z: 0.5 * z * z,
    "identity": lambda z: z,
}

_ELEMENTWISE_HEADS: dict[str, Callable[[Tensor], Tensor]] = {
    "identity": lambda z: z,
    "swish": F.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
}

HEADS: tuple[str, ...] = (*_ELEMENTWISE_HEADS, "softmax")


def apply_head(name: str, logits: Tensor) -> Tensor:
    """φ(f): `identity | swish | tanh | sigmoid` element-wise, `softmax` over the last dim; [n, O] -> [n, O]."""
    if name == "softmax":
        return torch.softmax(logits, dim=-1)
    try:
        return _ELEMENTWISE_HEADS[name](logits)
    except KeyError:
        raise ValueError(f"unknown output activation {name!r}; expected one of {', '.join(HEADS)}") from None


def head_of(net: nn.Module) -> str:
    """The head φ of a network by name: its `head` attribute (ntklab's networks), "identity" for any other
    module, whose outputs are then its logits."""
    return getattr(net, "head", "identity")


def hidden_activation(name: str) -> Callable[[Tensor], Tensor]:
    """σ by name, with an error that lists the known names."""
    try:
        return HIDDEN_ACTIVATIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown activation {name!r}; expected one of {', '.join(HIDDEN_ACTIVATIONS)}"
        ) from None
