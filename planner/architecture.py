"""The shapes of the network a ModelSpec describes, by arithmetic only (no torch, nothing allocated).

The service checks its caps with this module and the engine builds its layers from it, so the
parameter count the API refuses a spec on is the count of the network a worker would build.

Every network is a layer graph (an mlp, cnn or resnet is shorthand for one: planner/builtin_graphs.py)
planned layer by layer by api_schemas/graph_plan.py, then a linear readout F → O on the graph's
final vector [F]. The fan-in of a layer is in_l for a fully connected layer and C_in·k² for a
convolution, and the trainable parameter count is

    p = Σ_l out_l·fan_in_l + out_l·[bias]

over the graph's weight layers (plus layer norms' γ, β and embedding tables), plus the readout's
term when model.train_output_layer is true. A graph's input is model.input_shape when given, else
the flat vector of the data's features.

An architecture that cannot be built raises ValueError whose message starts with the dotted
field at fault ("model.kernel_size ...", "model.layers.3 ...").
"""

from __future__ import annotations

import math

from ntklab.api_schemas.graph_plan import GraphPlan, plan_graph
from ntklab.api_schemas.spec import AnyModel
from ntklab.planner.builtin_graphs import as_graph


def graph_input_shape(model: AnyModel, input_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape a graph reads one input as: model.input_shape when given, else the flat (∏ input_shape,)."""
    return tuple(model.input_shape) if model.input_shape is not None else (math.prod(input_shape),)


def plan_model_graph(model: AnyModel, input_shape: tuple[int, ...]) -> GraphPlan:
    """The shapes of a graph spec's layers for inputs of `input_shape` (the data's, flat or not)."""
    return plan_graph(model.layers, graph_input_shape(model, input_shape), bias=model.bias)


def count_parameters(model: AnyModel, input_shape: tuple[int, ...]) -> int:
    """Trainable parameters of the network the spec describes: Σ_l out_l·fan_in_l + out_l·[bias]."""
    graph = as_graph(model, input_shape)
    plan = plan_model_graph(graph, input_shape)
    readout = plan.features * graph.output_dim + (graph.output_dim if graph.bias else 0)
    return plan.parameters + (readout if graph.train_output_layer else 0)
