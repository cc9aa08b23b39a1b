"""Elementwise arithmetic and products: Add … Pow, MatMul, Gemm (numpy broadcasting, as ONNX specifies)."""

from __future__ import annotations

import torch

from workers.engine.onnx_ops.registry import Node, Run, operator


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
    """numpy.matmul; MatMul by an initializer then Add of a vector becomes a Linear layer instead."""
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
