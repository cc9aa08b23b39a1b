"""A layer graph (`model.kind = "graph"`) as a torch network with the engine's network interface.

    f(w; x) = c_r · W_r h_L(x) + β_r · b_r,   h_0 = x reshaped to model.input_shape,  h_l = layer_l(h_{l−1})

where h_L [n, F] is the graph's final vector and the readout (W_r, b_r, c_r) is the model's
output head: a ScaledLinear F → O, frozen when
train_output_layer is false, with c_r = 1/F and β_r = 1/√F under meanfield. The outputs are φ(f) for the
head φ. The shapes come from planner/architecture.py (the same plan the service counts
parameters on); the layers are engine/nets/graph_layers.py, attention.py and the scaled
layers of layers.py, each with the multiplier and initial std of parameterization.py for its
fan-in. Weights are drawn from one float64 CPU generator seeded with `seed`, layer by layer
in the order of the spec (depth first, a residual's branch before its projection; within a
layer: dense/conv weight then bias; attention Q, K, V, O; embedding table then positions),
the readout last; a built-in kind is the graph planner/builtin_graphs.py lowers it to.

Hidden representations (layer sensitivity): the output of every top-level `activation` and
`residual` layer — the post-activation α^(l) and the residual stream after each block, as
for the built-in kinds; in a graph with neither, the vector the readout reads.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ntklab.api_schemas.graph import (
    ActivationLayer,
    AvgPool,
    Conv2d,
    Dense,
    Embedding,
    Flatten,
    GlobalAvgPool,
    LayerNorm,
    MaxPool,
    PatchEmbed,
    Residual,
    SelfAttention,
)
from ntklab.api_schemas.graph_plan import PlannedLayer, layer_bias
from ntklab.api_schemas.spec import GraphModel
from ntklab.engine.nets import graph_layers
from ntklab.engine.nets.attention import SelfAttention as SelfAttentionModule
from ntklab.engine.nets.base import TangentNetwork
from ntklab.engine.nets.layers import ScaledConv2d, ScaledEmbedding, ScaledLinear
from ntklab.engine.nets.parameterization import bias_multiplier, initialise_, multiplier_and_std
from ntklab.planner.architecture import plan_model_graph


class GraphNetwork(TangentNetwork):
    """f(w; x) ∈ R^O; x is [n, *input_shape] or its flat rows [n, ∏ input_shape].

    The layers run in order through the named sections (one, `body`, for a graph; `stages` and
    `pooling` for a built-in kind, see build_graph_network), then the readout."""

    def __init__(
        self,
        sections: dict[str, list[nn.Module]],
        hidden: list[bool],
        readout: ScaledLinear,
        *,
        head: str,
        output_dim: int,
        input_shape: tuple[int, ...],
        parameterization: str,
        kind: str = "graph",
    ) -> None:
        super().__init__(head=head, output_dim=output_dim, kind=kind, parameterization=parameterization)
        for name, layers in sections.items():
            self.add_module(name, nn.ModuleList(layers))
        self.sections = tuple(sections)
        self.hidden = tuple(hidden)
        self.readout = readout
        self.input_shape = input_shape

    def forward(self, x: Tensor) -> Tensor:
        """Logits f(w; x), [n, O]."""
        return self.forward_with_hidden(x)[0]

    def forward_with_hidden(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Logits [n, O] and the outputs of the top-level activation and residual layers."""
        h = x.reshape(x.shape[0], *self.input_shape)
        hidden = []
        layers = (layer for name in self.sections for layer in self.get_submodule(name))
        for layer, is_hidden in zip(layers, self.hidden):
            h = layer(h)
            if is_hidden:
                hidden.append(h)
        return self.readout(h), hidden


def build_graph_network(
    model: GraphModel,
    input_shape: tuple[int, ...],
    *,
    seed: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    kind: str = "graph",
) -> GraphNetwork:
    """The seeded network of a graph spec; input_shape is the data's shape of one input (flat or not).

    kind: "graph", or the built-in kind (mlp, cnn, resnet) the graph was lowered from
    (planner/builtin_graphs.as_graph); a built-in kind's hidden layers are grouped into
    stages (graph_layers.Stage), so that its parameters keep the names its results have always
    carried: `stages.l.layer.weight`, `stages.l.layer.bias`, then `readout.weight`, `readout.bias`."""
    plan = plan_model_graph(model, input_shape)
    maker = LayerMaker(model, torch.Generator().manual_seed(seed), dtype, device)
    body = [maker.build(planned) for planned in plan.layers]
    readout = maker.linear(plan.features, model.output_dim, bias=model.bias, readout=True)
    readout.requires_grad_(model.train_output_layer)
    hidden = [isinstance(planned.layer, (ActivationLayer, Residual)) for planned in plan.layers]
    hidden[-1] = hidden[-1] or not any(hidden)
    sections = {"body": body}
    if kind != "graph":
        stages, pooling = graph_layers.stages(body)
        sections, hidden = {"stages": stages, "pooling": pooling}, [True] * len(stages) + [False] * len(pooling)
    return GraphNetwork(
        sections,
        hidden,
        readout,
        head=model.output_activation,
        output_dim=model.output_dim,
        input_shape=plan.input_shape,
        parameterization=model.parameterization,
        kind=kind,
    )


class LayerMaker:
    """Builds each planned layer's module and draws its weights, in spec order, from one generator."""

    def __init__(self, model: GraphModel, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        self.parameterization = model.parameterization
        self.default_bias = model.bias
        self.generator = generator
        self.common = {"dtype": dtype, "device": device}

    def build(self, planned: PlannedLayer) -> nn.Module:
        return BUILDERS[type(planned.layer)](self, planned)

    def linear(self, in_features: int, out_features: int, *, bias: bool, readout: bool = False) -> ScaledLinear:
        c, std = multiplier_and_std(in_features, self.parameterization, readout=readout)
        beta = bias_multiplier(in_features, self.parameterization, readout=readout)
        layer = ScaledLinear(
            in_features, out_features, bias=bias, weight_multiplier=c, bias_multiplier=beta, **self.common
        )
        initialise_(layer, std, self.generator)
        return layer

    def conv(
        self, in_channels: int, out_channels: int, kernel: int, *, stride: int, padding: int, bias: bool
    ) -> ScaledConv2d:
        c, std = multiplier_and_std(in_channels * kernel**2, self.parameterization, readout=False)
        layer = ScaledConv2d(
            in_channels,
            out_channels,
            kernel,
            stride=stride,
            padding=padding,
            bias=bias,
            weight_multiplier=c,
            **self.common,
        )
        initialise_(layer, std, self.generator)
        return layer

    def embedding(self, vocab: int, width: int) -> ScaledEmbedding:
        c, std = multiplier_and_std(1, self.parameterization, readout=False)
        layer = ScaledEmbedding(vocab, width, weight_multiplier=c, **self.common)
        initialise_(layer, std, self.generator)
        return layer

    def has_bias(self, planned: PlannedLayer) -> bool:
        return layer_bias(planned.layer, self.default_bias)


def _dense(maker: LayerMaker, planned: PlannedLayer) -> nn.Module:
    return maker.linear(planned.in_shape[-1], planned.layer.width, bias=maker.has_bias(planned))


def _conv2d(maker: LayerMaker, planned: PlannedLayer) -> nn.Module:
    spec = planned.layer
    return maker.conv(
        planned.in_shape[0],
        spec.width,
        spec.kernel_size,
        stride=spec.stride,
        padding=spec.padding,
        bias=maker.has_bias(planned),
    )


def _pool(maker: LayerMaker, planned: PlannedLayer) -> nn.Module:
    spec = planned.layer
    return graph_layers.Pool2d(spec.type.removesuffix("_pool"), spec.kernel_size, spec.step(), spec.padding)


def _layer_norm(maker: LayerMaker, planned: PlannedLayer) -> nn.Module:
    shape = planned.in_shape
    features = shape[0] if len(shape) == 3 else shape[-1]
    spec = planned.layer
    return graph_layers.LayerNorm(
        features, affine=spec.affine, eps=spec.eps, channels_first=len(shape) == 3, **maker.common
    )


def _embedding(maker: LayerMaker, planned: PlannedLayer) -> nn.Module:
    spec = planned.layer
    tokens = maker.embedding(spec.vocab, spec.width)
    positions = maker.embedding(planned.in_shape[0], spec.width) if spec.positions else None
    return graph_layers.TokenEmbedding(tokens, positions)


def _patch_embed(maker: LayerMaker, planned: PlannedLayer) -> nn.Module:
    spec = planned.layer
    conv = maker.conv(
        planned.in_shape[0], spec.width, spec.patch, stride=spec.patch, padding=0, bias=maker.has_bias(planned)
    )
    positions = maker.embedding(planned.out_shape[0], spec.width) if spec.positions else None
    return graph_layers.PatchEmbed(conv, positions)


def _self_attention(maker: LayerMaker, planned: PlannedLayer) -> nn.Module:
    d, width, bias = planned.in_shape[-1], planned.layer.width, maker.has_bias(planned)
    query, key, value = (maker.linear(d, width, bias=bias) for _ in range(3))
    return SelfAttentionModule(query, key, value, maker.linear(width, d, bias=bias), heads=planned.layer.heads)


def _residual(maker: LayerMaker, planned: PlannedLayer) -> nn.Module:
    branch = [maker.build(inner) for inner in planned.branch]
    return graph_layers.Residual(branch, _projection(maker, planned), planned.layer.scale)


def _projection(maker: LayerMaker, planned: PlannedLayer) -> nn.Module | None:
    """None for an identity skip; else a bias-free dense (vectors, tokens) or 1×1 strided conv (images)."""
    stride = planned.projection_stride
    if stride is None:
        return None
    if len(planned.in_shape) < 3:
        return maker.linear(planned.in_shape[-1], planned.out_shape[-1], bias=False)
    return maker.conv(planned.in_shape[0], planned.out_shape[0], 1, stride=stride, padding=0, bias=False)


BUILDERS = {
    Dense: _dense,
    Conv2d: _conv2d,
    AvgPool: _pool,
    MaxPool: _pool,
    GlobalAvgPool: lambda maker, planned: graph_layers.GlobalAvgPool(),
    Flatten: lambda maker, planned: graph_layers.Flatten(),
    ActivationLayer: lambda maker, planned: graph_layers.Activation(planned.layer.name),
    LayerNorm: _layer_norm,
    Embedding: _embedding,
    PatchEmbed: _patch_embed,
    SelfAttention: _self_attention,
    Residual: _residual,
}
