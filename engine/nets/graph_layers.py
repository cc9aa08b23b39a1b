"""The torch modules of a layer graph other than plain ScaledLinear / ScaledConv2d and attention.

Batched shapes: a vector h [n, d], tokens [n, T, d], an image [n, C, H, W].

    Activation      σ(h) element-wise
    Pool2d          avg / max over k×k windows of an image (avg counts zero padding)
    GlobalAvgPool   [n, C, H, W] → [n, C] (mean over H, W); [n, T, d] → [n, d] (mean over T)
    Flatten         [n, …] → [n, ∏ …]
    LayerNorm       (h − μ)/√(σ² + eps) over the features, then γ ⊙ · + β (plain nn.Parameters,
                    γ = 1, β = 0 at init: parameter-free at init, no multiplier)
    TokenEmbedding  ids [n, T] → c·E[id_t] (+ c·P[t]) [n, T, m]; E and P are ScaledEmbeddings
    PatchEmbed      [n, C, H, W] → conv(kernel = stride = p) [n, m, H/p, W/p] → [n, T, m] (+ c·P[t])
    Residual        skip(h) + scale · branch(h); skip = h, or a bias-free ScaledLinear / 1×1
                    ScaledConv2d projection where the branch changes the shape
    Stage           σ(layer(h)), or h + scale · σ(layer(h)): one hidden layer of an mlp, cnn or
                    resnet, its graph's (affine, activation) pair or residual([affine, activation])
                    held under one name, so that its weights are `stages.l.layer.weight` as ever

The position embedding P is a ScaledEmbedding read at the ids 0…T−1, so every trainable
weight of a graph except LayerNorm's γ, β sits in a ScaledLinear, ScaledConv2d or ScaledEmbedding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ntklab.engine.nets.activations import hidden_activation
from ntklab.engine.nets.layers import ScaledConv2d, ScaledEmbedding, ScaledLinear


class Activation(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self._sigma = hidden_activation(name)

    def forward(self, h: Tensor) -> Tensor:
        return self._sigma(h)

    def extra_repr(self) -> str:
        return self.name


class Pool2d(nn.Module):
    """[n, C, H, W] → [n, C, H', W'], the mean or the maximum over each window."""

    def __init__(self, mode: str, kernel_size: int, stride: int, padding: int) -> None:
        super().__init__()
        self.mode, self.kernel_size, self.stride, self.padding = mode, kernel_size, stride, padding
        self._pool = F.max_pool2d if mode == "max" else F.avg_pool2d

    def forward(self, h: Tensor) -> Tensor:
        return self._pool(h, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        return f"{self.mode}, k={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class GlobalAvgPool(nn.Module):
    def forward(self, h: Tensor) -> Tensor:
        return h.mean(dim=(2, 3)) if h.dim() == 4 else h.mean(dim=1)


class Flatten(nn.Module):
    def forward(self, h: Tensor) -> Tensor:
        return h.flatten(1)


class LayerNorm(nn.Module):
    """Normalises each token's (or vector's) last axis, or each pixel's channels when channels_first."""

    def __init__(self, features: int, *, affine: bool, eps: float, channels_first: bool, dtype, device) -> None:
        super().__init__()
        self.features, self.eps, self.channels_first = features, eps, channels_first
        self.weight = nn.Parameter(torch.ones(features, dtype=dtype, device=device)) if affine else None
        self.bias = nn.Parameter(torch.zeros(features, dtype=dtype, device=device)) if affine else None

    def forward(self, h: Tensor) -> Tensor:
        if self.channels_first:
            return self._normalise(h.movedim(1, -1)).movedim(-1, 1)
        return self._normalise(h)

    def _normalise(self, h: Tensor) -> Tensor:
        return F.layer_norm(h, (self.features,), self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.features}, affine={self.weight is not None}, eps={self.eps}, channels_first={self.channels_first}"
        )


def add_positions(z: Tensor, positions: ScaledEmbedding | None) -> Tensor:
    """z [n, T, m] + c·P[0…T−1] when there is a position embedding."""
    if positions is None:
        return z
    n, tokens, _ = z.shape
    return z + positions(torch.arange(tokens, device=z.device).expand(n, tokens))


class TokenEmbedding(nn.Module):
    def __init__(self, tokens: ScaledEmbedding, positions: ScaledEmbedding | None) -> None:
        super().__init__()
        self.tokens, self.positions = tokens, positions

    def forward(self, ids: Tensor) -> Tensor:
        return add_positions(self.tokens(ids), self.positions)


class PatchEmbed(nn.Module):
    def __init__(self, conv: ScaledConv2d, positions: ScaledEmbedding | None) -> None:
        super().__init__()
        self.conv, self.positions = conv, positions

    def forward(self, h: Tensor) -> Tensor:
        return add_positions(self.conv(h).flatten(2).transpose(1, 2), self.positions)


class Residual(nn.Module):
    def __init__(self, branch: list[nn.Module], projection: nn.Module | None, scale: float) -> None:
        super().__init__()
        self.branch = nn.Sequential(*branch)
        self.projection = projection
        self.scale = scale

    def forward(self, h: Tensor) -> Tensor:
        skip = h if self.projection is None else self.projection(h)
        return skip + self.scale * self.branch(h)

    def extra_repr(self) -> str:
        return f"scale={self.scale:.4g}"


class Stage(nn.Module):
    """α = σ(layer(h)), or h + residual_scale · σ(layer(h)) for a residual block."""

    def __init__(self, layer: nn.Module, activation: str, residual_scale: float | None) -> None:
        super().__init__()
        self.layer = layer
        self.activation = activation
        self.residual_scale = residual_scale
        self._sigma = hidden_activation(activation)

    def forward(self, h: Tensor) -> Tensor:
        a = self._sigma(self.layer(h))
        return a if self.residual_scale is None else h + self.residual_scale * a

    def extra_repr(self) -> str:
        return f"σ={self.activation}, residual_scale={self.residual_scale}"


def stages(body: list[nn.Module]) -> tuple[list[Stage], list[nn.Module]]:
    """The layers of a built-in kind's graph (planner/builtin_graphs.py) as its stages — each (affine,
    activation) pair, each residual([affine, activation]) — and the pooling after them (none, or one
    global average or flatten); the same modules, so the same weights and function."""
    grouped: list[Stage] = []
    index = 0
    while index < len(body) and isinstance(body[index], (Residual, ScaledLinear, ScaledConv2d)):
        layer = body[index]
        if isinstance(layer, Residual):
            affine, activation = layer.branch
            grouped.append(Stage(affine, activation.name, layer.scale))
            index += 1
        else:
            grouped.append(Stage(layer, body[index + 1].name, None))
            index += 2
    return grouped, body[index:]
