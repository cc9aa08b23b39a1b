"""The network of a ModelSpec: every kind is a layer graph, with ntk / standard / meanfield scaling.

Every network computes logits f(w; x) ∈ R^O through hidden layers α^(1..L) and a linear
readout, and outputs φ(f) for its head φ (activations.apply_head). An mlp, cnn or resnet is
shorthand for a layer graph (planner/builtin_graphs.py lowers it: the formulas are there),
built like any graph by engine/nets/graph.py; an uploaded ONNX model (kind "onnx") is converted
by engine/nets/onnx_model.py from the bytes the worker provides.

Parameterizations, with fan_in = in_features or in_channels·k² of the layer:

    ntk        W ~ N(0, 1), c = 1/√fan_in on every layer
    standard   W ~ N(0, 1/fan_in), c = 1 (LeCun; the same function as ntk at init for a seed)
    meanfield  hidden layers as ntk, readout W ~ N(0, 1) with c = 1/fan_in

Biases are b ~ N(0, 1) with multiplier β = 1, except the mean-field readout's β = 1/√fan_in
(parameterization.py says why). Weights are drawn in float64 from a CPU
torch.Generator seeded with `seed`, layer by layer (weight, then bias), then cast, so a
seed gives the same network on every device and dtype. `train_output_layer=False`
freezes the readout (requires_grad False).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ntklab.api_schemas.spec import AnyModel, OnnxModel
from ntklab.engine.callbacks import Checkpoint, no_checkpoint
from ntklab.engine.nets.base import TangentNetwork
from ntklab.engine.nets.graph import build_graph_network
from ntklab.engine.uploads import NO_UPLOADS, Uploads
from ntklab.planner.builtin_graphs import as_graph


def build_network(
    model: AnyModel,
    input_shape: tuple[int, ...],
    *,
    seed: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    checkpoint: Checkpoint = no_checkpoint,
    uploads: Uploads = NO_UPLOADS,
) -> TangentNetwork:
    """The seeded network of a spec; input_shape is (d,) or (C, H, W) of one input. An uploaded ONNX
    model's bytes are read from `uploads`; its conversion calls checkpoint() before each node."""
    if isinstance(model, OnnxModel):
        from ntklab.engine.nets.onnx_model import build_onnx_network

        return build_onnx_network(model, uploads.model(model.id), dtype=dtype, device=device, checkpoint=checkpoint)
    graph = as_graph(model, input_shape)
    return build_graph_network(graph, input_shape, seed=seed, dtype=dtype, device=device, kind=model.kind)


def trainable_parameters(net: nn.Module) -> dict[str, Tensor]:
    """name -> parameter for every parameter with requires_grad, in registration order."""
    return {name: p for name, p in net.named_parameters() if p.requires_grad}
