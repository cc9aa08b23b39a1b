import math

import pytest
import torch

from ntklab.api_schemas.spec import model_spec
from ntklab.engine.nets.activations import HIDDEN_ACTIVATIONS, apply_head
from ntklab.engine.nets.layers import ScaledConv2d, ScaledLinear
from ntklab.engine.nets.network import build_network, trainable_parameters
from ntklab.planner.architecture import count_parameters

SPECS = [
    (dict(hidden=[16, 3, 16], activation=["relu", "identity", "tanh"], output_dim=3), (5,)),
    (dict(hidden=[7], bias=False, output_dim=2), (4,)),
    (dict(hidden=[6, 5], output_dim=1, train_output_layer=False), (3,)),
    (dict(hidden=[4096, 5, 4096], output_dim=1), (16,)),
    (dict(kind="cnn", hidden=[4, 6], output_dim=2, readout="flatten"), (1, 8, 8)),
    (dict(kind="cnn", hidden=[3], output_dim=2, kernel_size=2, stride=2, padding=0), (2, 9, 7)),
    (dict(kind="cnn", hidden=[5, 5], output_dim=4, input_shape=[1, 8, 8], bias=False), (64,)),
    (dict(kind="resnet", hidden=[8], blocks=3, output_dim=2), (5,)),
    (dict(kind="resnet", block="conv", hidden=[4, 4, 4], blocks=2, output_dim=2, readout="flatten"), (1, 8, 8)),
    (dict(kind="resnet", block="conv", hidden=[4], output_dim=3, stride=2, train_output_layer=False), (3, 6, 6)),
]


@pytest.mark.parametrize("fields,shape", SPECS)
@pytest.mark.parametrize("parameterization", ["ntk", "standard", "meanfield"])
def test_count_parameters_equals_the_built_network(fields, shape, parameterization):
    spec = model_spec(**fields, parameterization=parameterization)
    net = build_network(spec, shape, seed=0)
    assert count_parameters(spec, shape) == sum(p.numel() for p in trainable_parameters(net).values())
    out = net(torch.randn(3, *shape))
    assert out.shape == (3, spec.output_dim)


def test_every_trainable_layer_is_scaled_and_frozen_readout_has_no_grad():
    net = build_network(model_spec(kind="cnn", hidden=[3], output_dim=2, train_output_layer=False), (1, 6, 6), seed=0)
    layers = [m for m in net.modules() if m.__class__ in (ScaledLinear, ScaledConv2d)]
    assert len(layers) == 2
    assert not any(p.requires_grad for p in net.readout.parameters())
    assert set(trainable_parameters(net)) == {"stages.0.layer.weight", "stages.0.layer.bias"}


@pytest.mark.parametrize("fields,shape", SPECS)
def test_a_builtin_kind_names_its_parameters_by_stage_and_its_hidden_layers_are_the_stages(fields, shape):
    """The names results carry (layer sensitivity, block norms, weight artifacts) are the built-in kinds' own:
    stages.l.layer.{weight, bias} for hidden layer l, then readout.{weight, bias}, though the network is a graph."""
    spec = model_spec(**fields)
    net = build_network(spec, shape, seed=0)
    layers = len(spec.hidden) if spec.kind != "resnet" else 1 + spec.blocks
    suffixes = ("weight", "bias") if spec.bias else ("weight",)
    stages = [f"stages.{l}.layer.{suffix}" for l in range(layers) for suffix in suffixes]
    assert [name for name, _ in net.named_parameters()] == stages + [f"readout.{suffix}" for suffix in suffixes]
    assert len(net.forward_with_hidden(torch.randn(2, *shape))[1]) == len(net.stages) == layers


def test_same_seed_gives_identical_weights_and_different_seed_does_not():
    spec = model_spec(kind="resnet", hidden=[6], blocks=2, output_dim=2)
    a, b, c = (build_network(spec, (4,), seed=s) for s in (3, 3, 4))
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        assert not torch.equal(pa, pc), name


@pytest.mark.parametrize(
    "fields,shape",
    [
        (dict(hidden=[32, 3, 32], activation=["tanh", "identity", "relu"], output_dim=3), (6,)),
        (dict(kind="cnn", hidden=[4, 5], output_dim=2, readout="flatten"), (2, 6, 6)),
        (dict(kind="resnet", block="conv", hidden=[4], output_dim=2), (1, 6, 6)),
    ],
)
def test_ntk_and_standard_parameterizations_give_the_same_function_at_init(fields, shape):
    x = torch.randn(5, *shape, dtype=torch.float64)
    ntk = build_network(model_spec(**fields), shape, seed=11, dtype=torch.float64)
    std = build_network(model_spec(**fields, parameterization="standard"), shape, seed=11, dtype=torch.float64)
    torch.testing.assert_close(ntk(x), std(x), rtol=1e-12, atol=1e-12)
    assert not torch.equal(ntk.stages[0].layer.weight, std.stages[0].layer.weight)


def test_ntk_layer_is_the_formula():
    spec = model_spec(hidden=[5], activation="erf", output_dim=2, output_activation="softmax")
    net = build_network(spec, (3,), seed=0, dtype=torch.float64)
    x = torch.randn(4, 3, dtype=torch.float64)
    w1, b1 = net.stages[0].layer.weight, net.stages[0].layer.bias
    v, b2 = net.readout.weight, net.readout.bias
    alpha = torch.erf(x @ w1.T / math.sqrt(3) + b1)
    logits = alpha @ v.T / math.sqrt(5) + b2
    torch.testing.assert_close(net(x), logits)
    torch.testing.assert_close(net.outputs(x), torch.softmax(logits, dim=1))


def test_meanfield_readout_scales_by_one_over_width():
    spec = model_spec(hidden=[50], activation="tanh", output_dim=1, parameterization="meanfield", bias=False)
    net = build_network(spec, (3,), seed=0, dtype=torch.float64)
    x = torch.randn(4, 3, dtype=torch.float64)
    _, (alpha,) = net.forward_with_hidden(x)
    torch.testing.assert_close(net(x), alpha @ net.readout.weight.T / 50)


def test_resnet_block_adds_a_branch_scaled_by_one_over_blocks():
    net = build_network(model_spec(kind="resnet", hidden=[6], blocks=4, output_dim=1), (3,), seed=0)
    x = torch.randn(2, 3)
    _, hidden = net.forward_with_hidden(x)
    block = net.stages[2]
    torch.testing.assert_close(hidden[2], hidden[1] + 0.25 * torch.relu(block.layer(hidden[1])))


def test_activations_and_heads():
    z = torch.linspace(-2, 2, 9, dtype=torch.float64)
    torch.testing.assert_close(HIDDEN_ACTIVATIONS["swish"](z), z * torch.sigmoid(z))
    torch.testing.assert_close(HIDDEN_ACTIVATIONS["quadratic"](z), z**2 / 2)
    torch.testing.assert_close(HIDDEN_ACTIVATIONS["erf"](z), torch.erf(z))
    logits = torch.randn(4, 3, dtype=torch.float64)
    torch.testing.assert_close(apply_head("softmax", logits).sum(1), torch.ones(4, dtype=torch.float64))
    torch.testing.assert_close(apply_head("swish", logits), logits * torch.sigmoid(logits))
    with pytest.raises(ValueError, match="unknown output activation"):
        apply_head("softsign", logits)


@pytest.mark.parametrize(
    "fields,shape,field",
    [
        (dict(kind="cnn", hidden=[3], output_dim=1, kernel_size=5, padding=0), (1, 3, 3), "model.kernel_size"),
        (dict(kind="cnn", hidden=[3], output_dim=1), (9,), "model.input_shape"),
        (dict(kind="resnet", hidden=[4, 5], output_dim=1), (3,), "model.hidden"),
        (dict(kind="resnet", block="conv", hidden=[4], output_dim=1, kernel_size=2), (1, 4, 4), "model.kernel_size"),
        (dict(hidden=[4]), (3,), "model.output_dim"),
    ],
)
def test_impossible_architectures_name_the_field(fields, shape, field):
    with pytest.raises(ValueError, match=field):
        count_parameters(model_spec(**fields), shape)
