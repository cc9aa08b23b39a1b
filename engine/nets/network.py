"""Networks built from a ModelSpec: mlp, cnn and resnet with ntk / standard / meanfield scaling.

Every network computes logits f(w; x) ∈ R^O through hidden layers α^(1..L) and a linear
readout, and outputs φ(f) for its head φ (activations.apply_head).

    mlp:    α^(l) = σ_l(z^(l)),  z^(l) = c_l · W^(l) α^(l−1) + β_l · b^(l)
    cnn:    the same with convolutions (kernel_size, stride, padding); the readout sees the
            last feature map after global average pooling or flattening
    resnet: α^(1) = σ(first layer(x)), then `blocks` residual blocks
            α^(l+1) = α^(l) + (1/B) · σ(layer(α^(l))), fc or conv (stride 1, 'same' padding);
            the 1/B branch scale (Du et al., 2019) bounds ‖α^(B+1)‖ by ‖α^(1)‖ plus the largest
            branch, so the output stays O(1) at any depth and width

Parameterizations, with fan_in = in_features or in_channels·k² of the layer:

    ntk        W ~ N(0, 1), c = 1/√fan_in on every layer
    standard   W ~ N(0, 1/fan_in), c = 1 (LeCun; the same function as ntk at init for a seed)
    meanfield  hidden layers as ntk, readout W ~ N(0, 1) with c = 1/fan_in

Biases are b ~ N(0, 1) with multiplier β = 1, except the mean-field readout's β = 1/√fan_in
(parameterization.py says why). Weights are drawn in float64 from a CPU
torch.Generator seeded with `seed`, layer by layer (weight, then bias), then cast, so a
seed gives the same network on every device and dtype. `train_output_layer=False`
freezes the readout (requires_grad False).

The layer sizes and the parameter count come from ntklab.planner.architecture (arithmetic on
the spec, shared with the service's caps); this module builds and initialises the layers.
A layer graph (kind "graph") is built by engine/nets/graph.py, an uploaded ONNX model
(kind "onnx") by engine/nets/onnx_model.py from the bytes the worker provides.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ntklab.api_schemas.spec import ModelSpec
from ntklab.engine.callbacks import Checkpoint, no_checkpoint
from ntklab.engine.nets.activations import apply_head, hidden_activation
from ntklab.engine.nets.graph import GraphNetwork, build_graph_network
from ntklab.engine.nets.layers import ScaledConv2d, ScaledLinear
from ntklab.engine.nets.parameterization import bias_multiplier, initialise_, multiplier_and_std
from ntklab.engine.uploads import NO_UPLOADS, Uploads
from ntklab.planner.architecture import LayerPlan, plan_network


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


class Network(nn.Module):
    """f(w; x) ∈ R^O; x is [n, d] or [n, C, H, W] (flat rows are reshaped for convolutional nets)."""

    def __init__(
        self,
        stages: list[Stage],
        readout: ScaledLinear,
        *,
        head: str,
        output_dim: int,
        image_shape: tuple[int, int, int] | None,
        pool: str | None,
        kind: str,
        parameterization: str,
    ) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)
        self.readout = readout
        self.head = head
        self.output_dim = output_dim
        self.image_shape = image_shape
        self.pool = pool
        self.kind = kind
        self.parameterization = parameterization

    def forward(self, x: Tensor) -> Tensor:
        """Logits f(w; x), [n, O]."""
        return self.forward_with_hidden(x)[0]

    def outputs(self, x: Tensor) -> Tensor:
        """φ(f(w; x)), [n, O]."""
        return apply_head(self.head, self.forward(x))

    def forward_with_hidden(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Logits [n, O] and the hidden representations α^(1..L) ([n, m_l] or [n, C_l, H_l, W_l])."""
        h = self._shape_input(x)
        hidden = []
        for stage in self.stages:
            h = stage(h)
            hidden.append(h)
        return self.readout(self._pool(h)), hidden

    def _shape_input(self, x: Tensor) -> Tensor:
        if self.image_shape is None:
            return x.flatten(1) if x.dim() > 2 else x
        return x.reshape(x.shape[0], *self.image_shape) if x.dim() == 2 else x

    def _pool(self, h: Tensor) -> Tensor:
        if h.dim() == 2:
            return h
        return h.mean(dim=(2, 3)) if self.pool == "global_avg" else h.flatten(1)


def build_network(
    model: ModelSpec,
    input_shape: tuple[int, ...],
    *,
    seed: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    checkpoint: Checkpoint = no_checkpoint,
    uploads: Uploads = NO_UPLOADS,
) -> Network | GraphNetwork:
    """The seeded network of a spec; input_shape is (d,) or (C, H, W) of one input. An uploaded ONNX
    model's bytes are read from `uploads`; its conversion calls checkpoint() before each node."""
    if model.kind == "graph":
        return build_graph_network(model, input_shape, seed=seed, dtype=dtype, device=device)
    if model.kind == "onnx":
        from ntklab.engine.nets.onnx_model import build_onnx_network

        return build_onnx_network(model, uploads.model(model.id), dtype=dtype, device=device, checkpoint=checkpoint)
    plan = plan_network(model, input_shape)
    generator = torch.Generator().manual_seed(seed)
    blocks = sum(layer.residual for layer in plan.hidden)
    stages = []
    for layer_plan in plan.hidden:
        layer = _layer(layer_plan, model, readout=False, dtype=dtype, device=device)
        _initialise(layer, layer_plan, model, readout=False, generator=generator)
        stages.append(Stage(layer, layer_plan.activation, 1.0 / blocks if layer_plan.residual else None))
    readout = _layer(plan.readout, model, readout=True, dtype=dtype, device=device)
    _initialise(readout, plan.readout, model, readout=True, generator=generator)
    readout.requires_grad_(model.train_output_layer)
    return Network(
        stages,
        readout,
        head=model.output_activation,
        output_dim=model.output_dim,
        image_shape=plan.image_shape,
        pool=plan.pool,
        kind=model.kind,
        parameterization=model.parameterization,
    )


def _layer(plan: LayerPlan, model: ModelSpec, *, readout: bool, dtype, device) -> ScaledLinear | ScaledConv2d:
    multiplier, _ = multiplier_and_std(plan.fan_in, model.parameterization, readout=readout)
    beta = bias_multiplier(plan.fan_in, model.parameterization, readout=readout)
    common = dict(bias=model.bias, weight_multiplier=multiplier, bias_multiplier=beta, dtype=dtype, device=device)
    if plan.kernel_size:
        return ScaledConv2d(
            plan.in_size, plan.out_size, plan.kernel_size, stride=plan.stride, padding=plan.padding, **common
        )
    return ScaledLinear(plan.in_size, plan.out_size, **common)


def _initialise(layer, plan: LayerPlan, model: ModelSpec, *, readout: bool, generator: torch.Generator) -> None:
    _, std = multiplier_and_std(plan.fan_in, model.parameterization, readout=readout)
    initialise_(layer, std, generator)


def trainable_parameters(net: nn.Module) -> dict[str, Tensor]:
    """name -> parameter for every parameter with requires_grad, in registration order."""
    return {name: p for name, p in net.named_parameters() if p.requires_grad}
