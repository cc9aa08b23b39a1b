"""Element-wise activations σ of the hidden layers and output heads φ of the network.

Hidden: α = σ(z) element-wise. Head: the network's outputs are φ(f(w; x)) ∈ R^O where
f are the logits; every head is element-wise except softmax, which normalises over
the last dimension. All maps take and return tensors of the same shape. A network names its head
(engine/nets/base.py, head_of: the identity for a module that is not a TangentNetwork).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def tanh(z: Tensor) -> Tensor:
    """tanh z; float32 on the CPU as 2σ(2z) − 1, elsewhere torch.tanh.

    torch's CPU tanh is a scalar loop (~2 ns per number on the 2-core dev machine, whatever
    ATEN_CPU_CAPABILITY says: 0.32 ms for a [16, 10⁴] batch), its sigmoid is vectorised (0.04 ms):
    forward and backward of a tanh layer take half the time this way. The identity is exact; in
    float32 its rounding error is at most ~2e-7 in absolute value (2σ − 1 loses the relative
    accuracy of tanh z for |z| ≪ 1, where torch.tanh has 6e-8), below the float32 rounding of the
    O(1) pre-activations it is applied to. Its derivatives by autograd are 4σ'(2z) and 8σ''(2z),
    accurate to float32 everywhere. float64 (the reference computations, the infinite-width
    quadrature) and every other device keep torch.tanh. tests/engine/test_activations.py checks
    values and first and second derivatives against float64.
    """
    if z.dtype == torch.float32 and z.device.type == "cpu":
        return torch.sigmoid(2 * z) * 2 - 1
    return torch.tanh(z)


HIDDEN_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": torch.relu,
    "tanh": tanh,
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


def hidden_activation(name: str) -> Callable[[Tensor], Tensor]:
    """σ by name, with an error that lists the known names."""
    try:
        return HIDDEN_ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; expected one of {', '.join(HIDDEN_ACTIVATIONS)}") from None
