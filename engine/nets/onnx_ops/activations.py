"""Activations and normalised exponentials: Relu … Gelu, Elu … Softsign, PRelu, HardSigmoid, Softmax, LogSoftmax.

The outputs of the activation nodes in ACTIVATIONS are the network's hidden representations
α^(l) (layer sensitivity), in execution order: the elementwise nonlinearities a network uses
as its activation. HardSigmoid is left out: in the networks that use it (squeeze-excitation
blocks, exports that write hard-swish as x · HardSigmoid(x)) its output is a [0, 1] gate that
multiplies another representation, not a layer's output; a hard-swish exported whole as
HardSwish is in. Softmax and LogSoftmax are outputs or attention weights, not activations.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ntklab.engine.nets.onnx_ops.registry import Node, Run, operator

ACTIVATIONS = (
    "Relu",
    "Tanh",
    "Sigmoid",
    "Softplus",
    "Gelu",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "Mish",
    "HardSwish",
    "PRelu",
    "Softsign",
)


@operator("Relu")
def relu(node: Node) -> Run:
    """max(0, x)."""
    return torch.relu


@operator("LeakyRelu", "alpha")
def leaky_relu(node: Node) -> Run:
    """x for x ≥ 0, αx below (α = 0.01)."""
    slope = node.attr("alpha", 0.01)
    return lambda x: F.leaky_relu(x, slope)


@operator("Tanh")
def tanh(node: Node) -> Run:
    """tanh x."""
    return torch.tanh


@operator("Sigmoid")
def sigmoid(node: Node) -> Run:
    """1 / (1 + e⁻ˣ)."""
    return torch.sigmoid


@operator("Softplus")
def softplus(node: Node) -> Run:
    """ln(1 + eˣ)."""
    return F.softplus


@operator("Gelu", "approximate")
def gelu(node: Node) -> Run:
    """x·Φ(x), or its tanh approximation (approximate = "tanh")."""
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise node.refuse(f"approximate={approximate!r} is not supported (none, tanh)")
    return lambda x: F.gelu(x, approximate=approximate)


@operator("Elu", "alpha")
def elu(node: Node) -> Run:
    """x for x > 0, α(eˣ − 1) below (α = 1)."""
    alpha = node.attr("alpha", 1.0)
    return lambda x: F.elu(x, alpha)


@operator("Selu", "alpha", "gamma")
def selu(node: Node) -> Run:
    """γx for x > 0, γα(eˣ − 1) below (α ≈ 1.6733, γ ≈ 1.0507: ONNX's float32 defaults)."""
    alpha = node.attr("alpha", 1.67326319217681884765625)
    gamma = node.attr("gamma", 1.05070102214813232421875)
    return lambda x: gamma * F.elu(x, alpha)


@operator("Celu", "alpha")
def celu(node: Node) -> Run:
    """max(0, x) + min(0, α(e^(x/α) − 1)) (α = 1)."""
    alpha = node.attr("alpha", 1.0)
    return lambda x: F.celu(x, alpha)


@operator("Mish")
def mish(node: Node) -> Run:
    """x · tanh(ln(1 + eˣ))."""
    return lambda x: x * torch.tanh(F.softplus(x))  # not F.mish: vmap has no batching rule for its backward


@operator("HardSigmoid", "alpha", "beta")
def hard_sigmoid(node: Node) -> Run:
    """max(0, min(1, αx + β)) (α = 0.2, β = 0.5)."""
    alpha, beta = (
        node.attr("alpha", 0.20000000298023224),
        node.attr("beta", 0.5),
    )  # float32's 0.2, as a written alpha=0.2 reads
    return lambda x: torch.clamp(alpha * x + beta, 0.0, 1.0)


@operator("HardSwish")
def hard_swish(node: Node) -> Run:
    """x · max(0, min(1, x/6 + 1/2))."""
    return lambda x: x * torch.clamp(x / 6 + 0.5, 0.0, 1.0)


@operator("PRelu")
def prelu(node: Node) -> Run:
    """x for x ≥ 0, slope · x below (slope broadcast to x's shape, e.g. [C, 1, 1] per channel)."""
    return lambda x, slope: torch.where(x >= 0, x, slope * x)


@operator("Softsign")
def softsign(node: Node) -> Run:
    """x / (1 + |x|)."""
    return F.softsign


def _softmax(node: Node, function) -> Run:
    if node.opset >= 13:
        axis = node.attr("axis", -1)
        return lambda x: function(x, dim=axis)
    axis = node.attr("axis", 1)

    def coerced(x):  # opsets < 13: the input is flattened to 2-D at `axis`
        rows = math.prod(x.shape[: axis % x.dim()])
        return function(x.reshape(rows, -1), dim=1).reshape(x.shape)

    return coerced


@operator("Softmax", "axis")
def softmax(node: Node) -> Run:
    """exp(x) / Σ_axis exp(x)."""
    return _softmax(node, torch.softmax)


@operator("LogSoftmax", "axis")
def log_softmax(node: Node) -> Run:
    """x − log Σ_axis exp(x)."""
    return _softmax(node, torch.log_softmax)
