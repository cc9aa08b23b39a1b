"""Comparisons, boolean logic and selection: Equal, Less, …, Not, And, Or, Xor, Where (numpy broadcasting).

Comparisons and logic give bool tensors (no gradient); Where selects from its float inputs and
is differentiable in both.
"""

from __future__ import annotations

import torch

from ntklab.engine.nets.onnx_ops.registry import Node, Run, operator


@operator("Equal")
def equal(node: Node) -> Run:
    """A = B (bool)."""
    return torch.eq


@operator("Less")
def less(node: Node) -> Run:
    """A < B (bool)."""
    return torch.lt


@operator("LessOrEqual")
def less_or_equal(node: Node) -> Run:
    """A ≤ B (bool)."""
    return torch.le


@operator("Greater")
def greater(node: Node) -> Run:
    """A > B (bool)."""
    return torch.gt


@operator("GreaterOrEqual")
def greater_or_equal(node: Node) -> Run:
    """A ≥ B (bool)."""
    return torch.ge


@operator("Not")
def logical_not(node: Node) -> Run:
    """¬X (bool)."""
    return torch.logical_not


@operator("And")
def logical_and(node: Node) -> Run:
    """A ∧ B (bool)."""
    return torch.logical_and


@operator("Or")
def logical_or(node: Node) -> Run:
    """A ∨ B (bool)."""
    return torch.logical_or


@operator("Xor")
def logical_xor(node: Node) -> Run:
    """A ⊕ B (bool)."""
    return torch.logical_xor


@operator("Where")
def where(node: Node) -> Run:
    """X where condition, else Y (numpy broadcasting of all three; differentiable in X and Y)."""
    return lambda condition, x, y: torch.where(condition.to(torch.bool), x, y)


@operator("IsNaN")
def is_nan(node: Node) -> Run:
    """X ≠ X elementwise (bool)."""
    return torch.isnan


@operator("IsInf", "detect_negative", "detect_positive")
def is_inf(node: Node) -> Run:
    """X = +∞ (detect_positive) or X = −∞ (detect_negative), elementwise (bool)."""
    negative, positive = bool(node.attr("detect_negative", 1)), bool(node.attr("detect_positive", 1))
    return lambda x: (torch.isposinf(x) & positive) | (torch.isneginf(x) & negative)
