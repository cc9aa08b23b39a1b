"""Convolutions and pooling: Conv, MaxPool, AveragePool, GlobalAveragePool (2-D).

A Conv whose weight is an initializer used once becomes a convolution layer of the network
(workers/engine/onnx_model.py) that the structured kernel covers; this builder runs the rest.
"""

from __future__ import annotations

import torch.nn.functional as F

from workers.engine.onnx_ops.registry import Node, OnnxConversionError, Run, operator


def no_auto_pad(node: Node) -> None:
    if node.attr("auto_pad", "NOTSET") != "NOTSET":
        raise OnnxConversionError("auto_pad is not supported; export with explicit pads")


@operator("Conv", "auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
def conv(node: Node) -> Run:
    """Cross-correlation of X [N, C, H, W] with W [M, C/group, kH, kW], plus B; pads as (begin…, end…)."""
    no_auto_pad(node)
    dilations, group = node.attr("dilations", [1, 1]), node.attr("group", 1)
    strides, pads = node.attr("strides", [1, 1]), node.attr("pads", [0, 0, 0, 0])
    if len(strides) != 2:
        raise node.refuse("only 2-D convolutions are supported")

    def run(x, w, b=None):
        x = F.pad(x, (pads[1], pads[3], pads[0], pads[2])) if any(pads) else x
        return F.conv2d(x, w, b, stride=strides, dilation=dilations, groups=group)

    return run


def _pool_pads(node: Node) -> tuple[list[int], list[int], list[int]]:
    kernel = node.attr("kernel_shape")
    if len(kernel) != 2:
        raise node.refuse("only 2-D pooling is supported")
    no_auto_pad(node)
    pads = node.attr("pads", [0, 0, 0, 0])
    if pads[0] != pads[2] or pads[1] != pads[3]:
        raise node.refuse("asymmetric pooling pads are not supported")
    return kernel, node.attr("strides", [1, 1]), pads[:2]


@operator("MaxPool", "auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides")
def max_pool(node: Node) -> Run:
    """Maximum over each window of X [N, C, H, W]."""
    kernel, strides, pads = _pool_pads(node)
    dilations, ceil = node.attr("dilations", [1, 1]), bool(node.attr("ceil_mode", 0))
    return lambda x: F.max_pool2d(x, kernel, strides, pads, dilations, ceil_mode=ceil)


@operator("AveragePool", "auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
def average_pool(node: Node) -> Run:
    """Mean over each window of X [N, C, H, W] (pads counted when count_include_pad)."""
    kernel, strides, pads = _pool_pads(node)
    include, ceil = bool(node.attr("count_include_pad", 0)), bool(node.attr("ceil_mode", 0))
    return lambda x: F.avg_pool2d(x, kernel, strides, pads, ceil_mode=ceil, count_include_pad=include)


@operator("GlobalAveragePool")
def global_average_pool(node: Node) -> Run:
    """Mean of X [N, C, …] over its spatial axes, kept as size 1."""
    return lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True)
