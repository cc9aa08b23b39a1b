"""The built-in kinds written as layer graphs: the same network, layer for layer, weight for weight.

    mlp     [flatten]?  (dense m_l, activation σ_l) for each hidden layer
    cnn     (conv2d C_l, activation σ_l) for each layer, then global_avg_pool or flatten
    resnet  dense | conv2d, activation σ_1, then per block
            residual([dense | conv2d (stride 1, padding k // 2), activation σ], scale = 1/blocks),
            then global_avg_pool or flatten for conv blocks

followed by the same readout and head (the graph keeps every other field of the spec). Built
with the same seed, the graph draws the same weights in the same order (engine/nets/graph.py),
so it computes the same function and has the same tangent kernel.
"""

from __future__ import annotations

from ntklab.api_schemas.graph import (
    ActivationLayer,
    Conv2d,
    Dense,
    Flatten,
    GlobalAvgPool,
    GraphLayer,
    Residual,
)
from ntklab.api_schemas.spec import ModelSpec
from ntklab.planner.architecture import LayerPlan, plan_network


def builtin_as_graph(model: ModelSpec, input_shape: tuple[int, ...]) -> ModelSpec:
    """The graph spec of an mlp, cnn or resnet spec for inputs of `input_shape` ((d,) or (C, H, W))."""
    plan = plan_network(model, input_shape)
    shape = plan.image_shape or tuple(input_shape)
    blocks = sum(layer.residual for layer in plan.hidden)
    layers: list[GraphLayer] = [Flatten()] if plan.image_shape is None and len(shape) > 1 else []
    for layer in plan.hidden:
        stage = [_affine(layer), ActivationLayer(name=layer.activation)]
        layers += [Residual(layers=stage, scale=1.0 / blocks)] if layer.residual else stage
    if plan.pool is not None:
        layers.append(GlobalAvgPool() if plan.pool == "global_avg" else Flatten())
    fields = model.model_dump(exclude={"kind", "layers", "input_shape"})
    return ModelSpec(**fields, kind="graph", layers=layers, input_shape=list(shape) if len(shape) > 1 else None)


def _affine(layer: LayerPlan) -> Dense | Conv2d:
    if layer.kernel_size:
        return Conv2d(width=layer.out_size, kernel_size=layer.kernel_size, stride=layer.stride, padding=layer.padding)
    return Dense(width=layer.out_size)
