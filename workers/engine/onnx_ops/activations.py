"""Activations and normalised exponentials: Relu … Gelu, Softmax, LogSoftmax.

The outputs of the activation nodes in ACTIVATIONS are the network's hidden representations
α^(l) (layer sensitivity), in execution order.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from workers.engine.onnx_ops.registry import Node, Run, operator

ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "Softplus", "Gelu", "LeakyRelu")


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
