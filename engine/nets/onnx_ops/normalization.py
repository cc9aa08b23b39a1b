"""Normalisations: LayerNormalization, InstanceNormalization, GroupNormalization, BatchNormalization (inference:
running statistics fixed, γ and β trainable).

Statistics are the biased (population) mean and variance. stash_type (the precision ONNX asks
the statistics to be computed in, float32 by default) is accepted and the statistics computed
in the input's own dtype: the network's float dtype, float32 or float64, so never less precise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ntklab.engine.nets.onnx_ops.registry import Node, Run, operator


def _normalized(x: Tensor, dims: tuple[int, ...], eps: float) -> Tensor:
    var, mean = torch.var_mean(x, dim=dims, correction=0, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps)


def _per_channel(v: Tensor, x: Tensor) -> Tensor:
    return v.reshape((1, -1) + (1,) * (x.dim() - 2))


@operator("LayerNormalization", "axis", "epsilon", "stash_type")
def layer_normalization(node: Node) -> Run:
    """Y = (X − mean) / √(var + ε) · scale + bias, mean and var over the axes from `axis` on (outputs Mean, InvStdDev not supported)."""
    axis, eps = node.attr("axis", -1), node.attr("epsilon", 1e-5)

    def run(x, scale, bias=None):
        shape = tuple(x.shape[axis % x.dim() :])
        if tuple(scale.shape) == shape and (bias is None or tuple(bias.shape) == shape):
            return F.layer_norm(x, shape, scale, bias, eps)
        y = _normalized(x, tuple(range(axis % x.dim(), x.dim())), eps) * scale
        return y if bias is None else y + bias

    return run


@operator("InstanceNormalization", "epsilon")
def instance_normalization(node: Node) -> Run:
    """Y = (X − mean) / √(var + ε) · scale[c] + B[c], mean and var of each (n, c) over the spatial axes of X [N, C, …]."""
    eps = node.attr("epsilon", 1e-5)

    def run(x, scale, bias):
        return _normalized(x, tuple(range(2, x.dim())), eps) * _per_channel(scale, x) + _per_channel(bias, x)

    return run


@operator("GroupNormalization", "epsilon", "num_groups", "stash_type")
def group_normalization(node: Node) -> Run:
    """Y = (X − mean) / √(var + ε) · scale + bias, mean and var of each (n, group of C/G channels); scale, bias per group [G] (opset 18–20) or per channel [C] (opset 21)."""
    eps, groups = node.attr("epsilon", 1e-5), node.attr("num_groups")
    if groups is None:
        raise node.refuse("num_groups is required")
    per_group = node.opset < 21

    def run(x, scale, bias):
        n, channels = x.shape[0], x.shape[1]
        y = _normalized(x.reshape(n, groups, -1), (2,), eps).reshape(x.shape)
        if per_group:  # GroupNormalization-18: one scale and bias per group, shared by its C/G channels
            scale, bias = scale.repeat_interleave(channels // groups), bias.repeat_interleave(channels // groups)
        return y * _per_channel(scale, x) + _per_channel(bias, x)

    return run


@operator("BatchNormalization", "epsilon", "momentum", "training_mode")
def batch_normalization(node: Node) -> Run:
    """Y = (X − mean) / √(var + ε) · γ + β per channel (axis 1), mean and var the running statistics (constants); inference only."""
    eps = node.attr("epsilon", 1e-5)
    if node.attr("training_mode", 0):
        raise node.refuse("training_mode=1 is not supported (export in eval mode)")

    def run(x, scale, bias, mean, var):
        shape = (1, -1) + (1,) * (x.dim() - 2)
        return (x - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + bias.reshape(
            shape
        )

    return run
