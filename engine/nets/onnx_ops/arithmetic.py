"""Elementwise arithmetic and products: Add … Pow, Abs … Ceil, Min, Max, Clip, Mod, MatMul, Gemm, Einsum
(numpy broadcasting, as ONNX specifies)."""

from __future__ import annotations

import functools

import torch

from ntklab.engine.nets.onnx_ops.registry import Node, Run, float_like, operator


@operator("Gemm", "alpha", "beta", "transA", "transB")
def gemm(node: Node) -> Run:
    """Y = α·A'B' + β·C (A' = Aᵀ if transA, B' = Bᵀ if transB); a Gemm by an initializer becomes a Linear layer instead."""
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    trans_a, trans_b = node.attr("transA", 0), node.attr("transB", 0)

    def run(a, b, c=None):
        y = alpha * ((a.T if trans_a else a) @ (b.T if trans_b else b))
        return y if c is None else y + beta * c

    return run


@operator("MatMul")
def matmul(node: Node) -> Run:
    """numpy.matmul; a MatMul by an initializer (or its Transpose), with or without a bias Add, becomes a Linear layer."""
    return torch.matmul


@operator("Add")
def add(node: Node) -> Run:
    """A + B."""
    return torch.add


@operator("Sub")
def sub(node: Node) -> Run:
    """A − B."""
    return torch.sub


@operator("Mul")
def mul(node: Node) -> Run:
    """A · B."""
    return torch.mul


@operator("Div")
def div(node: Node) -> Run:
    """A / B (integers: truncated toward zero, as C)."""
    return lambda a, b: torch.div(a, b, rounding_mode="trunc") if not a.is_floating_point() else a / b


@operator("Neg")
def neg(node: Node) -> Run:
    """−X."""
    return torch.neg


@operator("Pow")
def power(node: Node) -> Run:
    """X ** Y (Y cast to X's type)."""
    return lambda x, y: torch.pow(x, y.to(x.dtype) if x.is_floating_point() else y)


@operator("Sqrt")
def sqrt(node: Node) -> Run:
    """√X."""
    return torch.sqrt


@operator("Exp")
def exp(node: Node) -> Run:
    """eˣ."""
    return torch.exp


@operator("Log")
def log(node: Node) -> Run:
    """ln X."""
    return torch.log


@operator("Erf")
def erf(node: Node) -> Run:
    """erf X."""
    return torch.erf


@operator("Abs")
def absolute(node: Node) -> Run:
    """|X|."""
    return torch.abs


@operator("Reciprocal")
def reciprocal(node: Node) -> Run:
    """1 / X."""
    return torch.reciprocal


@operator("Sin")
def sin(node: Node) -> Run:
    """sin X."""
    return torch.sin


@operator("Cos")
def cos(node: Node) -> Run:
    """cos X."""
    return torch.cos


@operator("Sign")
def sign(node: Node) -> Run:
    """sign X ∈ {−1, 0, 1} (gradient 0)."""
    return torch.sign


@operator("Floor")
def floor(node: Node) -> Run:
    """⌊X⌋ (gradient 0)."""
    return torch.floor


@operator("Ceil")
def ceil(node: Node) -> Run:
    """⌈X⌉ (gradient 0)."""
    return torch.ceil


@operator("Min")
def minimum(node: Node) -> Run:
    """Elementwise min of all inputs (numpy broadcasting)."""
    return lambda *xs: functools.reduce(torch.minimum, xs)


@operator("Max")
def maximum(node: Node) -> Run:
    """Elementwise max of all inputs (numpy broadcasting)."""
    return lambda *xs: functools.reduce(torch.maximum, xs)


@operator("Clip", "min", "max")
def clip(node: Node) -> Run:
    """min(max(X, min), max), ∂/∂X = 1 strictly inside (min, max); min and max are inputs from opset 11, attributes before."""
    low_attribute, high_attribute = node.attr("min"), node.attr("max")

    def run(x, low=None, high=None):
        low = float_like(x, low) if low is not None else low_attribute
        high = float_like(x, high) if high is not None else high_attribute
        y = x if low is None else torch.clamp(x, min=low)  # one bound at a time: an input and an attribute may mix
        y = y if high is None else torch.clamp(y, max=high)
        if not x.is_floating_point():
            return y
        # the derivative of torch's hardtanh / relu6 / relu, which export as Clip: 0 at a bound, not clamp's 1 there
        inside = torch.ones_like(x, dtype=torch.bool)
        inside = inside if low is None else inside & (x > low)
        inside = inside if high is None else inside & (x < high)
        return torch.where(inside, x, y.detach())

    return run


@operator("Mod", "fmod")
def mod(node: Node) -> Run:
    """A mod B: fmod = 0 the sign of B (integer style, torch.remainder), fmod = 1 the sign of A (C fmod)."""
    fmod = node.attr("fmod", 0)
    if fmod not in (0, 1):
        raise node.refuse(f"fmod={fmod} is not supported (0, 1)")
    return torch.fmod if fmod else torch.remainder


@operator("Einsum", "equation")
def einsum(node: Node) -> Run:
    """Σ over the summed indices of the product of the inputs, as `equation` says (numpy.einsum)."""
    equation = "".join(str(node.attr("equation", "")).split())
    if not equation:
        raise node.refuse("equation='' is not supported (an Einsum needs an equation)")
    return lambda *xs: torch.einsum(equation, *xs)
