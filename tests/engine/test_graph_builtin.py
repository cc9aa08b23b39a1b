"""The three built-in kinds are expressible as graphs: builtin_as_graph's graph, built from the same
seed, has the same weights, the same function, the same tangent kernel and the same hidden layers."""

import pytest
import torch

from ntklab.api_schemas.spec import model_spec
from ntklab.engine.diagnostics.sensitivity import layer_sensitivity
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.nets.network import build_network, trainable_parameters
from ntklab.planner.builtin_graphs import builtin_as_graph

CASES = {
    "mlp-bottleneck": ({"hidden": [12, 3, 12], "activation": ["tanh", "identity", "relu"], "output_dim": 3}, (5,)),
    "mlp-swish-head-no-bias": ({"hidden": [9], "bias": False, "output_dim": 2, "output_activation": "swish"}, (4,)),
    "mlp-on-images": ({"hidden": [6, 6], "activation": "gelu", "output_dim": 2, "input_shape": [1, 3, 3]}, (1, 3, 3)),
    "cnn-flatten-strided": (
        {"kind": "cnn", "hidden": [3, 4], "output_dim": 2, "readout": "flatten", "stride": 2},
        (2, 7, 7),
    ),
    "cnn-global-avg": (
        {"kind": "cnn", "hidden": [4], "activation": "softplus", "output_dim": 3, "output_activation": "softmax"},
        (1, 6, 6),
    ),
    "resnet-fc": (
        {
            "kind": "resnet",
            "hidden": [7, 7, 7, 7],
            "blocks": 3,
            "activation": ["tanh", "relu", "erf", "tanh"],
            "output_dim": 2,
        },
        (4,),
    ),
    "resnet-conv": (
        {
            "kind": "resnet",
            "block": "conv",
            "hidden": [3],
            "output_dim": 2,
            "readout": "flatten",
            "train_output_layer": False,
        },
        (1, 5, 5),
    ),
}


def pair(name: str, parameterization: str, seed: int = 7):
    fields, shape = CASES[name]
    model = model_spec(**fields, parameterization=parameterization)
    graph = builtin_as_graph(model, shape)
    builtin = build_network(model, shape, seed=seed, dtype=torch.float64)
    return builtin, build_network(graph, shape, seed=seed, dtype=torch.float64), shape


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("parameterization", ["ntk", "standard", "meanfield"])
def test_builtin_and_graph_have_the_same_weights_function_and_kernel(name, parameterization):
    builtin, graph, shape = pair(name, parameterization)
    assert graph.kind == "graph" and builtin.kind == CASES[name][0].get("kind", "mlp")
    weights = [p for p in builtin.parameters()]
    assert len(weights) == len(list(graph.parameters()))
    for a, b in zip(weights, graph.parameters()):
        assert torch.equal(a, b) and a.requires_grad == b.requires_grad

    def scaled(net):
        return [m.weight_multiplier for m in net.modules() if hasattr(m, "weight_multiplier")]

    assert scaled(builtin) == scaled(graph)
    x = torch.randn(5, *shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(graph.outputs(x), builtin.outputs(x), rtol=0, atol=0)
    for of in ("outputs", "logits"):
        K_builtin = tangent_kernel(builtin, x, method="jacobian", of=of)
        K_graph = tangent_kernel(graph, x, method="jacobian", of=of)
        assert torch.linalg.norm(K_graph - K_builtin) <= 1e-12 * torch.linalg.norm(K_builtin)
    assert sum(p.numel() for p in trainable_parameters(graph).values()) == sum(
        p.numel() for p in trainable_parameters(builtin).values()
    )


@pytest.mark.parametrize("name", ["mlp-bottleneck", "cnn-global-avg", "resnet-fc", "resnet-conv"])
def test_builtin_and_graph_report_the_same_hidden_layers(name):
    builtin, graph, shape = pair(name, "ntk")
    x = torch.randn(3, *shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    hidden_builtin, hidden_graph = builtin.forward_with_hidden(x)[1], graph.forward_with_hidden(x)[1]
    assert len(hidden_builtin) == len(hidden_graph)
    for a, b in zip(hidden_builtin, hidden_graph):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert layer_sensitivity(builtin, x) == layer_sensitivity(graph, x)
