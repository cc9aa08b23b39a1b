"""Graph networks in torch: the arithmetic count and shapes are the built network's, the layers
compute their formulas, the parameterization and seeding follow engine/nets/network.py, token inputs work."""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ntklab.api_schemas.spec import AnyModel, JobSpec, model_spec
from ntklab.engine.curvature.hessian import model_hessian
from ntklab.engine.diagnostics.sensitivity import layer_sensitivity
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.nets.graph_layers import Residual
from ntklab.engine.nets.layers import ScaledConv2d, ScaledEmbedding, ScaledLinear
from ntklab.engine.nets.network import build_network, trainable_parameters
from ntklab.planner.architecture import count_parameters, plan_model_graph

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {
    path.stem: JobSpec.model_validate_json(path.read_text()) for path in (REPO / "examples/graphs").glob("*.json")
}
LN, GAP, FLAT = {"type": "layer_norm"}, {"type": "global_avg_pool"}, {"type": "flatten"}
TOKENS = [  # token ids [T = 5] from a vocabulary of 11
    {"type": "embedding", "vocab": 11, "width": 8, "positions": True},
    {"type": "residual", "layers": [LN, {"type": "self_attention", "heads": 2, "width": 6, "bias": False}]},
    {"type": "residual", "layers": [LN, {"type": "dense", "width": 12}, {"type": "activation", "name": "erf"}]},
    {"type": "layer_norm", "affine": False},
    GAP,
]
MORE = {
    "tokens": (TOKENS, (5,)),
    "pools-and-projections": (
        [
            {"type": "conv2d", "width": 3, "kernel_size": 3, "padding": 0, "bias": False},
            {"type": "avg_pool", "kernel_size": 3, "stride": 1, "padding": 1},
            {
                "type": "residual",
                "scale": 0.5,
                "layers": [
                    LN,
                    {"type": "conv2d", "width": 5, "stride": 2},
                    {"type": "activation", "name": "swish"},
                ],
            },
            {"type": "max_pool", "kernel_size": 2, "stride": 1, "padding": 1},
            {"type": "patch_embed", "patch": 2, "width": 7},
            {"type": "residual", "layers": [{"type": "dense", "width": 4}]},
            FLAT,
        ],
        (2, 9, 9),
    ),
    "dense-only": ([{"type": "dense", "width": 6}, {"type": "dense", "width": 3, "bias": False}], (4,)),
}


def graph_model(name: str, **fields) -> tuple[AnyModel, tuple[int, ...]]:
    if name in EXAMPLES:
        spec = EXAMPLES[name]
        return spec.model.model_copy(update=fields), (math.prod(spec.model.input_shape),)
    layers, shape = MORE[name]
    return model_spec(kind="graph", layers=layers, input_shape=list(shape), output_dim=3, **fields), shape


def inputs(model: AnyModel, n: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if model.layers[0].type == "embedding":
        return torch.randint(0, model.layers[0].vocab, (n, *model.input_shape), generator=generator).to(dtype)
    return torch.randn(n, *model.input_shape, generator=generator, dtype=dtype)


NAMES = [*sorted(EXAMPLES), *MORE]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("parameterization", ["ntk", "standard", "meanfield"])
def test_arithmetic_count_and_shapes_are_the_built_networks(name, parameterization):
    model, shape = graph_model(name, parameterization=parameterization)
    net = build_network(model, shape, seed=0)
    trainable = sum(p.numel() for p in trainable_parameters(net).values())
    assert count_parameters(model, shape) == trainable
    plan = plan_model_graph(model, shape)
    seen = []

    def expect(planned):
        def hook(module, args, output):
            assert tuple(output.shape[1:]) == planned.out_shape, planned.path
            seen.append(planned.path)

        return hook

    handles = []
    for module, planned in zip(net.body, plan.layers):
        handles.append(module.register_forward_hook(expect(planned)))
        if isinstance(module, Residual):
            handles += [m.register_forward_hook(expect(p)) for m, p in zip(module.branch, planned.branch)]
    assert net(inputs(model, 3).float()).shape == (3, model.output_dim)
    for handle in handles:
        handle.remove()
    assert len(seen) == sum(1 + len(p.branch) for p in plan.layers)


def test_frozen_readout_is_not_counted_and_has_no_grad():
    model, shape = graph_model("vgg-like", train_output_layer=False)
    net = build_network(model, shape, seed=0)
    assert not any(p.requires_grad for p in net.readout.parameters())
    assert count_parameters(model, shape) == sum(p.numel() for p in trainable_parameters(net).values())


def test_every_trainable_weight_is_a_scaled_layer_except_layer_norms_gain_and_bias():
    model, shape = graph_model("tokens")
    net = build_network(model, shape, seed=0)
    owners = {type(m).__name__ for m in net.modules() if any(True for _ in m.parameters(recurse=False))}
    assert owners == {"ScaledEmbedding", "ScaledLinear", "LayerNorm"}
    scaled = [m for m in net.modules() if isinstance(m, (ScaledLinear, ScaledConv2d, ScaledEmbedding))]
    assert (
        len(scaled) == 2 + 4 + 2 + 1
    )  # tokens + positions, Q K V O, MLP dense + the skip's projection 8 → 12, readout


def test_same_seed_same_weights_and_ntk_equals_standard_at_init():
    model, shape = graph_model("pools-and-projections")
    a, b, c = (build_network(model, shape, seed=s, dtype=torch.float64) for s in (3, 3, 4))
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    drawn = [(ma, mc) for ma, mc in zip(a.modules(), c.modules()) if isinstance(ma, (ScaledLinear, ScaledConv2d))]
    assert len(drawn) == 7 and not any(torch.equal(ma.weight, mc.weight) for ma, mc in drawn)
    for name in ("pools-and-projections", "tokens", "vit-small"):
        model, shape = graph_model(name)
        ntk = build_network(model, shape, seed=5, dtype=torch.float64)
        std = build_network(
            model.model_copy(update={"parameterization": "standard"}), shape, seed=5, dtype=torch.float64
        )
        x = inputs(model, 4)
        torch.testing.assert_close(ntk(x), std(x), rtol=1e-12, atol=1e-12)


def test_multipliers_follow_the_parameterization():
    model, shape = graph_model("vit-small")
    for parameterization, readout_c in (("ntk", 1 / 4), ("standard", 1.0), ("meanfield", 1 / 16)):
        net = build_network(model.model_copy(update={"parameterization": parameterization}), shape, seed=0)
        patch, attention, mlp = net.body[0], net.body[1].branch[1], net.body[2].branch
        assert patch.conv.weight_multiplier == pytest.approx(1.0 if parameterization == "standard" else 1 / 2)
        assert patch.positions.weight_multiplier == 1.0
        assert attention.query.weight_multiplier == pytest.approx(1.0 if parameterization == "standard" else 1 / 4)
        assert mlp[3].weight_multiplier == pytest.approx(1.0 if parameterization == "standard" else 1 / math.sqrt(32))
        assert net.readout.weight_multiplier == pytest.approx(readout_c)
        std = float(mlp[3].weight.detach().std())
        assert std == pytest.approx(1 / math.sqrt(32) if parameterization == "standard" else 1.0, rel=0.1)


def test_attention_is_scaled_dot_product_attention_with_one_over_root_d_head():
    model = model_spec(
        kind="graph",
        layers=[{"type": "self_attention", "heads": 3, "width": 12}, GAP],
        input_shape=[5, 4],
        output_dim=1,
    )
    attention = build_network(model, (20,), seed=0, dtype=torch.float64).body[0]
    h = torch.randn(2, 5, 4, dtype=torch.float64)
    q, k, v = (
        layer(h).reshape(2, 5, 3, 4).transpose(1, 2) for layer in (attention.query, attention.key, attention.value)
    )
    expected = F.scaled_dot_product_attention(q, k, v)  # softmax(q kᵀ / √d_head) v
    torch.testing.assert_close(attention(h), attention.out(expected.transpose(1, 2).reshape(2, 5, 12)))


def test_layer_norm_patch_embed_and_positions_are_their_formulas():
    layers = [
        {"type": "layer_norm", "eps": 1e-3},
        {"type": "patch_embed", "patch": 2, "width": 3, "positions": True},
        GAP,
    ]
    net = build_network(
        model_spec(kind="graph", layers=layers, input_shape=[2, 4, 6], output_dim=1), (48,), seed=0, dtype=torch.float64
    )
    norm, patch = net.body[0], net.body[1]
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5), norm.bias.uniform_(-1, 1)
    x = torch.randn(2, 2, 4, 6, dtype=torch.float64)
    mean, var = x.mean(dim=1, keepdim=True), x.var(dim=1, unbiased=False, keepdim=True)
    normed = (x - mean) / torch.sqrt(var + 1e-3) * norm.weight[:, None, None] + norm.bias[:, None, None]
    torch.testing.assert_close(norm(x), normed)
    patches = F.unfold(x, 2, stride=2).transpose(1, 2)  # [n, T = 2·3, C·2·2], row-major over the patch grid
    conv = patch.conv
    tokens = conv.weight_multiplier * patches @ conv.weight.reshape(3, -1).T + conv.bias
    tokens = tokens + patch.positions.weight_multiplier * patch.positions.weight
    torch.testing.assert_close(patch(x), tokens)


def test_hidden_representations_are_activation_and_residual_outputs():
    model, shape = graph_model("resnet-layernorm")
    net = build_network(model, shape, seed=0, dtype=torch.float64)
    _, hidden = net.forward_with_hidden(inputs(model, 2))
    assert [tuple(h.shape[1:]) for h in hidden] == [(6, 8, 8), (6, 8, 8), (12, 4, 4)]
    assert len(layer_sensitivity(net, inputs(model, 2))) == 3
    model, shape = graph_model("dense-only")
    net = build_network(model, shape, seed=0, dtype=torch.float64)
    assert [tuple(h.shape[1:]) for h in net.forward_with_hidden(inputs(model, 2))[1]] == [(3,)]
    assert len(layer_sensitivity(net, inputs(model, 2))) == 1


@pytest.mark.parametrize("name", NAMES)
def test_the_three_kernel_methods_agree_on_graph_networks(name):
    model, shape = graph_model(name)
    net = build_network(model, shape, seed=2, dtype=torch.float64)
    x = inputs(model, 3)
    jacobian = tangent_kernel(net, x, method="jacobian")
    scale = float(torch.linalg.norm(jacobian))
    for method in ("structured", "ntk_vp"):
        assert float(torch.linalg.norm(tangent_kernel(net, x, method=method) - jacobian)) <= 1e-10 * scale, method


def test_integer_token_ids_give_the_kernel_and_hessian_of_their_float_copies():
    model, shape = graph_model("tokens")
    net = build_network(model, shape, seed=1, dtype=torch.float64)
    ids = inputs(model, 4).long()
    assert torch.equal(net(ids), net(ids.double()))
    kernel = tangent_kernel(net, ids, method="jacobian")
    assert kernel.shape == (12, 12) and kernel.dtype == torch.float64
    torch.testing.assert_close(kernel, tangent_kernel(net, ids.double(), method="jacobian"), rtol=0, atol=0)
    report = model_hessian(net, ids[:1], top_k=2, iterations=16)
    assert report.norm == model_hessian(net, ids[:1].double(), top_k=2, iterations=16).norm > 0
