"""An uploaded network in the parameterization the job asks for, with the function exported at init.

A converted layer (engine/nets/onnx_model.py) computes z = c · (W applied to h) + β · b with
the weights W as exported and c = 1 (a Gemm's alpha). Reparameterizing it by a multiplier m
stores the trainable w̃ = W / m and computes z = (c·m) · (w̃ applied to h) + β · b, so

    z(w̃₀) = z(W₀)                    the outputs at init are the exported ones (to rounding)
    ∂f/∂w̃ = m · ∂f/∂W                the gradient, so the tangent kernel, changes:
    K = Σ_l m_l² J_l J_lᵀ + Σ_b J_b J_bᵀ     J_l = ∂f/∂W_l [n·O, |W_l|] of the exported weights

with m per layer from its fan-in F and its place in the graph:

    parameterization   input layer   hidden layer   readout
    standard           1             1              1            (as exported)
    ntk                1/√F          1/√F           1/√F
    mup                1             1/√F           1/F          (µP, Yang & Hu 2021, in the abc form whose
                                                                  hidden layers are ntk's: a = 0, ½, 1)

F is in_features for a Linear (Gemm, MatMul), C/groups·k (k the kernel's elements) for a
convolution and 1 for an embedding table (a one-hot input has norm 1, as for the built-in
kinds: parameterization.py), so an embedding is never rescaled. An input layer is one that no
other layer precedes (its data comes from the network's input through weight-free nodes or
fallback parameters only), a readout one that precedes no other layer; a layer that is both
(a network of one layer) is an input layer. Biases keep their multiplier β (1, or a Gemm's
beta), as do the parameters that are not in a layer (`weights.*`: norm gains and shifts,
recurrent weights, tied weights; onnx_model.py lists them): their kernel blocks are the
exported ones under every parameterization.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import torch
from torch import nn

from ntklab.engine.nets.layers import ScaledConv2d, ScaledEmbedding, ScaledLinear

INPUT, HIDDEN, READOUT = "input", "hidden", "readout"


class LayerStep(Protocol):
    """A node of the converted graph: the tensors it reads and writes, and the index of its layer (None if not one)."""

    inputs: list[str]
    outputs: list[str]
    layer: int | None


def fan_in(layer: nn.Module) -> int:
    """F: in_features (Linear), C/groups · kernel elements (Conv1d/2d), 1 (an embedding table)."""
    if isinstance(layer, ScaledEmbedding):
        return 1
    if isinstance(layer, ScaledConv2d):
        return layer.fan_in
    if isinstance(layer, ScaledLinear):
        return layer.in_features
    raise TypeError(f"{type(layer).__name__} is not a converted weight layer")


def layer_roles(steps: Sequence[LayerStep]) -> dict[int, str]:
    """input / hidden / readout per layer index, from the steps in execution (topological) order."""
    after: set[str] = set()  # tensors computed from some layer's output
    first: set[int] = set()
    for step in steps:
        downstream = any(name in after for name in step.inputs)
        if step.layer is not None and not downstream:
            first.add(step.layer)
        if downstream or step.layer is not None:
            after.update(step.outputs)
    feeds: set[str] = set()  # tensors some layer reads, directly or through other nodes
    last: set[int] = set()
    for step in reversed(steps):
        upstream = any(name in feeds for name in step.outputs)
        if step.layer is not None and not upstream:
            last.add(step.layer)
        if upstream or step.layer is not None:
            feeds.update(step.inputs)
    layers = {step.layer for step in steps if step.layer is not None}
    return {index: INPUT if index in first else READOUT if index in last else HIDDEN for index in layers}


def multiplier(parameterization: str, fan_in: int, role: str) -> float:
    """m of a layer with fan-in F and role input / hidden / readout (the table of the module docstring)."""
    if parameterization == "standard" or (parameterization == "mup" and role == INPUT):
        return 1.0
    if parameterization == "mup" and role == READOUT:
        return 1.0 / fan_in
    if parameterization in ("ntk", "mup"):
        return 1.0 / math.sqrt(fan_in)
    raise ValueError(f"parameterization {parameterization!r} is not one of an uploaded model (standard, ntk, mup)")


@torch.no_grad()
def reparameterize_(layers: nn.ModuleList, steps: Sequence[LayerStep], parameterization: str) -> None:
    """In place: each layer's c ← c·m and W ← W/m (computed in float64, then cast), m = multiplier(…)."""
    for index, role in layer_roles(steps).items():
        layer = layers[index]
        m = multiplier(parameterization, fan_in(layer), role)
        if m != 1.0:
            layer.weight.copy_(layer.weight.double() / m)
            layer.weight_multiplier *= m
