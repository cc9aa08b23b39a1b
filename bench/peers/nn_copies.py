"""torch.nn copies of the bench networks for nngeometry, whose hooks know torch.nn.Linear and Conv2d only.

Each scaled layer z = c·(W ⋆ x) + β·b becomes the torch.nn layer with weight c·W and bias β·b: the
same function. Its kernel is over c·W instead of W, so it equals ntklab's only where c = 1 (the
standard parameterization; in the NTK one each layer's block would differ by c²): the MLP and
CNN rows use the standard parameterization for that reason.

    sequential_copy   ntklab mlp / cnn network -> torch.nn.Sequential (layer, σ, …, [GAP, flatten], readout)
    vit_copy          bench_graph_kernels.ViT -> the same ViT built from torch.nn layers
"""

from __future__ import annotations

import torch
from torch import nn

from bench.bench_graph_kernels import ViT
from ntklab.engine.nets.layers import ScaledConv2d, ScaledLinear

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def sequential_copy(net: nn.Module) -> nn.Sequential:
    """The torch.nn.Sequential computing net's logits, weights c·W and biases β·b."""
    modules: list[nn.Module] = []
    for stage in net.stages:
        modules += [_plain(stage.layer), ACTIVATIONS[stage.activation]()]
    if len(net.input_shape) == 3:  # a convolutional net reads (C, H, W) and pools before its readout
        modules += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    modules.append(_plain(net.readout))
    return nn.Sequential(*modules)


def vit_copy(net: ViT) -> ViT:
    """ViT(scaled=False) of the same depth with net's weights: c·W, β·b, and the LayerNorm, class and position tables as they are."""
    copy = ViT(depth=len(net.blocks), scaled=False).to(net.readout.weight.dtype)
    with torch.no_grad():
        for (_, mine), (_, theirs) in zip(net.named_modules(), copy.named_modules(), strict=True):
            if isinstance(mine, (ScaledLinear, ScaledConv2d)):
                _copy_scaled(mine, theirs)
            elif isinstance(mine, nn.LayerNorm):
                theirs.load_state_dict(mine.state_dict())
        copy.cls.copy_(net.cls)
        copy.position.copy_(net.position)
    return copy


def _plain(layer: nn.Module) -> nn.Module:
    W = layer.weight
    if isinstance(layer, ScaledConv2d):
        plain = nn.Conv2d(
            layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride, layer.padding, dtype=W.dtype
        )
    else:
        plain = nn.Linear(layer.in_features, layer.out_features, dtype=W.dtype)
    with torch.no_grad():
        _copy_scaled(layer, plain)
    return plain


def _copy_scaled(mine: nn.Module, theirs: nn.Module) -> None:
    theirs.weight.copy_(mine.weight_multiplier * mine.weight)
    theirs.bias.copy_(mine.bias_multiplier * mine.bias)
