"""Normalisations: LayerNormalization, BatchNormalization (inference: running statistics fixed, γ and β trainable)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workers.engine.onnx_ops.registry import Node, Run, operator


@operator("LayerNormalization", "axis", "epsilon", "stash_type")
def layer_normalization(node: Node) -> Run:
    """(X − mean) / √(var + ε) · scale + bias over the axes from `axis` on."""
    axis, eps = node.attr("axis", -1), node.attr("epsilon", 1e-5)

    def run(x, scale, bias=None):
        return F.layer_norm(x, x.shape[axis % x.dim():], scale, bias, eps)

    return run


@operator("BatchNormalization", "epsilon", "momentum", "training_mode")
def batch_normalization(node: Node) -> Run:
    """(X − mean) / √(var + ε) · γ + β per channel (axis 1), mean and var the running statistics (constants)."""
    eps = node.attr("epsilon", 1e-5)
    if node.attr("training_mode", 0):
        raise node.refuse("training_mode batch normalization is not supported (export in eval mode)")

    def run(x, scale, bias, mean, var):
        shape = (1, -1) + (1,) * (x.dim() - 2)
        return (x - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + bias.reshape(shape)

    return run
