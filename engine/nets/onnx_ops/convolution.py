"""Convolutions and pooling in 1-D, 2-D and 3-D: Conv, ConvTranspose, MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool.

A Conv whose weight is an initializer used once becomes a convolution layer of the network
(engine/nets/onnx_model.py) that the structured kernel covers; this builder runs the rest.

Geometry follows the ONNX spec (opsets 11–21); per spatial axis i, with the window's extent
sw = (k − 1)·d + 1 and pads given as (begin…, end…):

    explicit pads        out = ⌊(in + pb + pe − sw) / s⌋ + 1   (⌈·⌉ with ceil_mode, less a window that would start in the end pad)
    SAME_UPPER / _LOWER  out = ⌈in / s⌉, total pad max(0, (out − 1)·s + sw − in), the odd one at the end / the beginning
    VALID                no pads

The pads are worked out from the input's spatial shape when the node runs (Python ints, so the
run functions stay traceable by vmap / jacrev: no data-dependent control flow).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ntklab.engine.nets.onnx_ops.registry import Node, OnnxConversionError, Run, operator

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


# ---- attributes and geometry


def _auto_pad(node: Node) -> str:
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad not in AUTO_PADS:
        raise node.refuse(f"auto_pad={auto_pad} is not supported ({', '.join(AUTO_PADS)})")
    return auto_pad


def _rank(node: Node, *names: str) -> int | None:
    """The number of spatial axes the attributes imply (None if none says); refuses other than 1, 2 or 3."""
    lengths = {len(node.attr(name)) // (2 if name == "pads" else 1) for name in names if node.attr(name) is not None}
    if len(lengths) > 1:
        raise node.refuse(f"attributes {', '.join(names)} disagree on the number of spatial axes")
    rank = lengths.pop() if lengths else None
    if rank is not None and rank not in (1, 2, 3):
        raise node.refuse(f"{rank}-D {node.proto.op_type} is not supported (1-D, 2-D, 3-D)")
    return rank


def _axes(value: list[int] | None, n: int, default: int, what: str) -> list[int]:
    if value is None:
        return [default] * n
    if len(value) != n:
        raise OnnxConversionError(f"{what} has {len(value)} entries for {n} spatial axes")
    return [int(v) for v in value]


def _explicit_pads(pads: list[int] | None, n: int) -> tuple[list[int], list[int]]:
    pads = _axes(pads, 2 * n, 0, "pads")
    return pads[:n], pads[n:]


def _same_pads(auto_pad: str, total: int) -> tuple[int, int]:
    """(begin, end) of `total` padding: the odd one at the end for SAME_UPPER, at the beginning for SAME_LOWER."""
    begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
    return begin, total - begin


def _window_pads(
    auto_pad: str, pads: list[int] | None, sizes, kernel, strides, dilations
) -> tuple[list[int], list[int]]:
    """(begin, end) pads of a convolution or pooling window per spatial axis (explicit or auto_pad)."""
    n = len(sizes)
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    if auto_pad == "NOTSET":
        return _explicit_pads(pads, n)
    begin, end = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        out = -(-size // s)
        b, e = _same_pads(auto_pad, max(0, (out - 1) * s + (k - 1) * d + 1 - size))
        begin.append(b)
        end.append(e)
    return begin, end


def _pad(x: Tensor, begin: list[int], end: list[int], value: float = 0.0) -> Tensor:
    """x padded (or, for negative entries, cropped) on its trailing len(begin) axes."""
    if not any(begin) and not any(end):
        return x
    pairs: list[int] = []
    for b, e in zip(reversed(begin), reversed(end)):
        pairs += [b, e]
    return F.pad(x, pairs, value=value)


def _channel(b: Tensor, n: int) -> Tensor:
    return b.reshape((1, -1) + (1,) * n)


# ---- convolutions


@operator("Conv", "auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
def conv(node: Node) -> Run:
    """Y = W ⋆ X + B: cross-correlation of X [N, C, D₁…Dₙ] (n = 1, 2, 3) with W [M, C/group, k₁…kₙ] per group."""
    auto_pad, group = _auto_pad(node), int(node.attr("group", 1))
    _rank(node, "dilations", "kernel_shape", "pads", "strides")
    dilations, kernel_shape, pads, strides = (
        node.attr(name) for name in ("dilations", "kernel_shape", "pads", "strides")
    )

    def run(x, w, b=None):
        n = x.dim() - 2
        if n not in CONV:
            raise OnnxConversionError(f"Conv of a {x.dim()}-D input is not supported (1-D, 2-D, 3-D convolutions)")
        kernel = list(w.shape[2:])
        if kernel_shape is not None and list(kernel_shape) != kernel:
            raise OnnxConversionError(f"Conv kernel_shape {list(kernel_shape)} disagrees with the weight's {kernel}")
        d, s = _axes(dilations, n, 1, "dilations"), _axes(strides, n, 1, "strides")
        begin, end = _window_pads(auto_pad, pads, x.shape[2:], kernel, s, d)
        if begin == end:
            return CONV[n](x, w, b, stride=s, padding=begin, dilation=d, groups=group)
        return CONV[n](_pad(x, begin, end), w, b, stride=s, dilation=d, groups=group)

    return run


@operator(
    "ConvTranspose",
    "auto_pad",
    "dilations",
    "group",
    "kernel_shape",
    "output_padding",
    "output_shape",
    "pads",
    "strides",
)
def conv_transpose(node: Node) -> Run:
    """Y = Wᵀ ⋆ X + B: the transpose (gradient) of Conv, X [N, C, D₁…Dₙ], W [C, M/group, k₁…kₙ], pads cropping the output."""
    auto_pad, group = _auto_pad(node), int(node.attr("group", 1))
    _rank(node, "dilations", "kernel_shape", "output_padding", "pads", "strides")
    dilations, kernel_shape, pads, strides = (
        node.attr(name) for name in ("dilations", "kernel_shape", "pads", "strides")
    )
    output_padding, output_shape = node.attr("output_padding"), node.attr("output_shape")

    def run(x, w, b=None):
        n = x.dim() - 2
        if n not in CONV_TRANSPOSE:
            raise OnnxConversionError(f"ConvTranspose of a {x.dim()}-D input is not supported (1-D, 2-D, 3-D)")
        kernel = list(w.shape[2:])
        if kernel_shape is not None and list(kernel_shape) != kernel:
            raise OnnxConversionError(
                f"ConvTranspose kernel_shape {list(kernel_shape)} disagrees with the weight's {kernel}"
            )
        d, s = _axes(dilations, n, 1, "dilations"), _axes(strides, n, 1, "strides")
        extra = _axes(output_padding, n, 0, "output_padding")
        sizes = list(x.shape[2:])
        full = [si * (size - 1) + (k - 1) * di + 1 for size, k, si, di in zip(sizes, kernel, s, d)]
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            target = [si * size for si, size in zip(s, sizes)] if output_shape is None else list(output_shape)[-n:]
            split = [_same_pads(auto_pad, f + e - t) for f, e, t in zip(full, extra, target)]
            begin, end = [p[0] for p in split], [p[1] for p in split]
        elif auto_pad == "VALID":
            begin, end = [0] * n, [0] * n
        else:
            begin, end = _explicit_pads(pads, n)
        y = CONV_TRANSPOSE[n](x, w, None, stride=s, dilation=d, groups=group)
        y = _pad(y, [-p for p in begin], [e - p for e, p in zip(extra, end)])
        return y if b is None else y + _channel(b, n)

    return run


# ---- pooling


def _pool_geometry(auto_pad: str, pads, ceil: bool, sizes, kernel, strides, dilations) -> tuple[list[int], list[int]]:
    """(begin, end) pads that make a plain (padding 0, floor) pooling give the spec's output windows: the
    explicit or automatic pads, the end one lengthened for the last window of ceil_mode."""
    begin, end = _window_pads(auto_pad, pads, sizes, kernel, strides, dilations)
    ends = []
    for size, k, s, d, b, e in zip(sizes, kernel, strides, dilations, begin, end):
        span = size + b + e - ((k - 1) * d + 1)
        out = (-(-span // s) if ceil and auto_pad == "NOTSET" else span // s) + 1
        if ceil and auto_pad == "NOTSET" and (out - 1) * s >= size + b:
            out -= 1
        ends.append(e + max(0, (out - 1) * s + (k - 1) * d + 1 - (size + b + e)))
    return begin, ends


def _pool_attributes(node: Node) -> tuple[str, list[int], list[int] | None, list[int] | None, list[int] | None, bool]:
    auto_pad = _auto_pad(node)
    kernel = node.attr("kernel_shape")
    if kernel is None:
        raise node.refuse("kernel_shape is required")
    _rank(node, "dilations", "kernel_shape", "pads", "strides")
    return (
        auto_pad,
        list(kernel),
        node.attr("strides"),
        node.attr("dilations"),
        node.attr("pads"),
        bool(node.attr("ceil_mode", 0)),
    )


@operator("MaxPool", "auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides")
def max_pool(node: Node) -> Run:
    """Y = max of X [N, C, D₁…Dₙ] (n = 1, 2, 3) over each (dilated) window, pads excluded."""
    if node.attr("storage_order", 0) != 0:
        raise node.refuse(
            "storage_order=1 is not supported (it only orders the Indices output, which is not supported either)"
        )
    auto_pad, kernel, strides, dilations, pads, ceil = _pool_attributes(node)
    n = len(kernel)

    def run(x):
        s, d = _axes(strides, n, 1, "strides"), _axes(dilations, n, 1, "dilations")
        sizes = list(x.shape[2:])
        if auto_pad == "NOTSET":
            begin, end = _explicit_pads(pads, n)
            if begin == end and all(
                2 * p <= k for p, k in zip(begin, kernel)
            ):  # torch's own padding and ceil_mode agree with the spec
                return MAX_POOL[n](x, kernel, s, begin, d, ceil_mode=ceil)
        begin, end = _pool_geometry(auto_pad, pads, ceil, sizes, kernel, s, d)
        return MAX_POOL[n](_pad(x, begin, end, -math.inf), kernel, s, 0, d)

    return run


@operator("AveragePool", "auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides")
def average_pool(node: Node) -> Run:
    """Y = mean of X [N, C, D₁…Dₙ] (n = 1, 2, 3) over each (dilated) window; pads counted only when count_include_pad."""
    auto_pad, kernel, strides, dilations, pads, ceil = _pool_attributes(node)
    include = bool(node.attr("count_include_pad", 0))
    n = len(kernel)

    def run(x):
        s, d = _axes(strides, n, 1, "strides"), _axes(dilations, n, 1, "dilations")
        sizes = list(x.shape[2:])
        if auto_pad == "NOTSET" and all(di == 1 for di in d):
            begin, end = _explicit_pads(pads, n)
            if begin == end and all(
                2 * p <= k for p, k in zip(begin, kernel)
            ):  # torch's own padding and ceil_mode agree with the spec
                return AVG_POOL[n](x, kernel, s, begin, ceil_mode=ceil, count_include_pad=include)
        begin, end = _pool_geometry(auto_pad, pads, ceil, sizes, kernel, s, d)
        pad_begin, pad_end = _window_pads(auto_pad, pads, sizes, kernel, s, d)
        # window sums of the zero-padded input and, by the same windows, the number of elements each counts:
        # the input's (and the pads' when count_include_pad), never the ceil_mode overhang past the end pad
        ones = torch.ones([1, 1] + sizes, dtype=x.dtype, device=x.device)
        counted = (
            _pad(ones, begin, end)
            if not include
            else _pad(_pad(ones, pad_begin, pad_end, 1.0), [0] * n, [e - p for e, p in zip(end, pad_end)])
        )
        window = torch.ones([1, 1] + kernel, dtype=x.dtype, device=x.device)
        count = CONV[n](counted, window, stride=s, dilation=d)
        channels = x.shape[1]
        sums = CONV[n](
            _pad(x, begin, end), window.expand([channels, 1] + kernel), stride=s, dilation=d, groups=channels
        )
        return sums / count

    return run


@operator("GlobalAveragePool")
def global_average_pool(node: Node) -> Run:
    """Y = mean of X [N, C, …] over its spatial axes, kept as size 1."""
    return lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


@operator("GlobalMaxPool")
def global_max_pool(node: Node) -> Run:
    """Y = max of X [N, C, …] over its spatial axes, kept as size 1."""
    return lambda x: x.amax(dim=tuple(range(2, x.dim())), keepdim=True)
