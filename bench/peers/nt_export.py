"""ntklab's initial weights in neural-tangents' parameter layout: the arrays nt_worker.py rebuilds a network from.

A sequential ntklab network (mlp or cnn: hidden layers z = c·(W ⋆ α) + β·b, then σ; for a cnn
global average pooling; a dense readout) becomes stax layers computing the same function, since
stax's NTK parameterization computes (W_std / √fan_in)·(W ⋆ x) + b_std·b:

    ScaledLinear  W [out, in], b [out]          -> stax.Dense(out, W_std = c·√fan_in, b_std = β):
                                                   W [in, out] = Wᵀ, b [out]
    ScaledConv2d  W [out, in, k, k], b [out]    -> stax.Conv(out, (k, k), padding="SAME", same W_std, b_std):
    (stride 1, padding k // 2)                     W [k, k, in, out] (HWIO), b [out]
    images x [n, C, H, W] (NCHW)                -> [n, H, W, C] (NHWC, stax's default)

fan_in = in or in·k². Saved keys: x, layers, activation, pool ("global_avg" or "none"), and per
layer l: kind{l} ("dense" or "conv"), W{l}, b{l}, W_std{l}, b_std{l}.

The ViT block (bench_graph_kernels.ViT) has no stax counterpart (class token, learned positions,
its attention's head split): its parameters keep their torch names and layouts, saved as
"param:<name>", each scaled layer's c and β as "c:<layer>" and "beta:<layer>", beside x and
heads; vit_function.vit_logits computes the same function from them.

Float64 copies of the weights (the worker casts to float32 for timing). Imports torch, not JAX.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from ntklab.engine.nets.layers import ScaledConv2d, ScaledLinear


def sequential_problem(net: nn.Module, x: Tensor) -> dict[str, object]:
    """The stax arrays of an ntklab mlp/cnn network and its inputs x ([n, d] or [n, C, H, W])."""
    layers = [stage.layer for stage in net.stages] + [net.readout]
    activations = {stage.activation for stage in net.stages}
    if len(activations) != 1 or any(stage.residual_scale is not None for stage in net.stages):
        raise ValueError("one hidden activation and no residual blocks (a plain stax.serial)")
    images = x.dim() == 4
    problem: dict[str, object] = {
        "kind": "sequential",
        "x": _numpy(x.permute(0, 2, 3, 1) if images else x),
        "layers": len(layers),
        "activation": activations.pop(),
        "pool": "global_avg" if images else "none",
    }
    for l, layer in enumerate(layers):
        problem |= {f"{key}{l}": value for key, value in _stax_layer(layer).items()}
    return problem


def vit_problem(net: nn.Module, x: Tensor) -> dict[str, object]:
    """The ViT's parameters by torch name, the scaled layers' c and β, heads and x [n, 1, H, W]."""
    problem: dict[str, object] = {"kind": "vit", "x": _numpy(x), "heads": net.blocks[0].heads}
    problem |= {f"param:{name}": _numpy(p) for name, p in net.named_parameters()}
    for name, module in net.named_modules():
        if isinstance(module, (ScaledLinear, ScaledConv2d)):
            problem |= {f"c:{name}": module.weight_multiplier, f"beta:{name}": module.bias_multiplier}
    return problem


def _stax_layer(layer: nn.Module) -> dict[str, object]:
    W = layer.weight
    if isinstance(layer, ScaledConv2d):
        k = layer.kernel_hw[0]
        same = layer.padding in (k // 2, (k // 2, k // 2)) and layer.kernel_hw == (k, k) and k % 2 == 1
        if not same or layer.stride_hw != (1, 1) or layer.dilation_hw != (1, 1) or layer.groups != 1:
            raise ValueError("stax.Conv(padding='SAME') needs a square odd kernel, stride 1, padding k // 2")
        kind, weight = "conv", W.permute(2, 3, 1, 0)
    elif isinstance(layer, ScaledLinear):
        kind, weight = "dense", W.T
    else:
        raise TypeError(f"no stax counterpart for {type(layer).__name__}")
    fan_in = math.prod(W.shape[1:])
    return {
        "kind": kind,
        "W": _numpy(weight),
        "b": _numpy(layer.bias),
        "W_std": layer.weight_multiplier * math.sqrt(fan_in),
        "b_std": layer.bias_multiplier,
    }


def _numpy(t: Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).contiguous().numpy()
