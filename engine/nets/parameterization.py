"""A weight layer's multiplier c and initial standard deviation under each parameterization.

A layer computes z = c · (W applied to h) + β · b with raw weights W; with fan_in = in_features
(dense), in_channels·k² (convolution) or 1 (an embedding table, whose one-hot input has norm 1):

    ntk        W ~ N(0, 1),          c = 1/√fan_in
    standard   W ~ N(0, 1/fan_in),   c = 1          (the same function as ntk at init for a seed)
    meanfield  hidden layers as ntk; the readout W ~ N(0, 1), c = 1/fan_in

A bias b ~ N(0, 1) enters as β · b, with β = c·√fan_in where the parameterization has
multipliers, so its kernel block β²·GGᵀ is of the order of the weights' c²·(AAᵀ)⊙GGᵀ
(‖a‖² ≈ fan_in for inputs of order 1), and 1 under standard, which has no multipliers:

    ntk        β = 1
    standard   β = 1           (the weights' block is fan_in times ntk's: the bias's share is O(1/fan_in))
    meanfield  hidden layers as ntk; the readout β = 1/√fan_in   (β = 1 would carry the whole kernel)

docs/diagnostics.md ("Bias multipliers") has the reasoning. The one rule of every layer graph
(graph.py; an mlp, cnn or resnet is one). Draws are float64 from a CPU torch.Generator, the weight
then the bias, then cast.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def multiplier_and_std(fan_in: int, parameterization: str, *, readout: bool) -> tuple[float, float]:
    """(c, std of W); c·std = 1/√fan_in except for a mean-field readout (1/fan_in)."""
    if parameterization == "standard":
        return 1.0, 1.0 / math.sqrt(fan_in)
    if parameterization == "meanfield" and readout:
        return 1.0 / fan_in, 1.0
    return 1.0 / math.sqrt(fan_in), 1.0


def bias_multiplier(fan_in: int, parameterization: str, *, readout: bool) -> float:
    """β of the layer's bias: c·√fan_in (ntk 1, a mean-field readout 1/√fan_in), and 1 under standard."""
    if parameterization == "meanfield" and readout:
        return 1.0 / math.sqrt(fan_in)
    return 1.0


@torch.no_grad()
def initialise_(layer: nn.Module, std: float, generator: torch.Generator) -> None:
    """weight ~ N(0, std²), then bias ~ N(0, 1) when the layer has one; float64 draws from `generator`."""
    layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator, dtype=torch.float64) * std)
    bias = getattr(layer, "bias", None)
    if bias is not None:
        bias.copy_(torch.randn(bias.shape, generator=generator, dtype=torch.float64))
