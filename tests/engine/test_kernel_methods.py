import math

import pytest
import torch
from torch.func import functional_call, jacrev

from bench.bench_kernels import method_row_inputs, method_row_network, method_rows
from ntklab.api_schemas.spec import model_spec
from ntklab.engine.kernels import ntk, symmetric_gram
from ntklab.engine.kernels.ntk import kernel_spectrum, relative_change, resolve_method, tangent_kernel
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.network import build_network, trainable_parameters

METHODS = ("structured", "jacobian", "ntk_vp")

CASES = {
    "mlp-bottleneck-softmax": (
        dict(hidden=[16, 3, 16], activation=["tanh", "identity", "relu"], output_dim=3, output_activation="softmax"),
        (5,),
    ),
    "mlp-bottleneck-swish": (
        dict(hidden=[16, 3, 16], activation=["gelu", "identity", "softplus"], output_dim=3, output_activation="swish"),
        (5,),
    ),
    "mlp-no-bias-frozen-readout": (
        dict(hidden=[9, 7], activation="erf", bias=False, output_dim=2, train_output_layer=False),
        (4,),
    ),
    "cnn-global-avg": (dict(kind="cnn", hidden=[3, 4], output_dim=2, output_activation="sigmoid"), (1, 8, 8)),
    "cnn-flatten-strided": (dict(kind="cnn", hidden=[3, 4], output_dim=2, stride=2, readout="flatten"), (1, 8, 8)),
    "resnet-fc": (dict(kind="resnet", hidden=[8], blocks=2, activation="swish", output_dim=2), (5,)),
    "resnet-conv": (
        dict(
            kind="resnet", block="conv", hidden=[3], blocks=2, activation="tanh", output_dim=2, output_activation="tanh"
        ),
        (1, 8, 8),
    ),
}


def dense_reference_kernel(net, x, of):
    """J Jᵀ with J = jacrev of the flat-parameter map w ↦ vec(φ(f(w; X))) ∈ R^{n·O}."""
    params = trainable_parameters(net)
    names, shapes = list(params), [p.shape for p in params.values()]
    sizes = [p.numel() for p in params.values()]
    w = torch.cat([p.detach().reshape(-1) for p in params.values()])

    def flat_outputs(w):
        unflat = {k: t.reshape(s) for k, t, s in zip(names, torch.split(w, sizes), shapes)}
        logits = functional_call(net, unflat, (x,))
        return (apply_head(net.head, logits) if of == "outputs" else logits).reshape(-1)

    J = jacrev(flat_outputs)(w)
    return J @ J.T


def relative_error(K, reference):
    return float(torch.linalg.norm(K.double() - reference.double()) / torch.linalg.norm(reference.double()))


@pytest.mark.parametrize("parameterization", ["ntk", "standard", "meanfield"])
@pytest.mark.parametrize("case", list(CASES))
def test_three_methods_and_dense_reference_agree_in_float64(case, parameterization):
    fields, shape = CASES[case]
    net = build_network(model_spec(**fields, parameterization=parameterization), shape, seed=1, dtype=torch.float64)
    x = torch.randn(5, *shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for of in ("outputs", "logits"):
        reference = dense_reference_kernel(net, x, of)
        assert reference.shape == (5 * net.output_dim,) * 2
        for method in METHODS:
            K = tangent_kernel(net, x, method=method, of=of)
            assert K.dtype == torch.float64 and not K.requires_grad
            assert relative_error(K, reference) < 1e-10, (method, of)


def test_outputs_and_logits_kernels_differ_under_a_nonlinear_head_and_agree_under_identity():
    fields, shape = CASES["mlp-bottleneck-softmax"]
    x = torch.randn(4, *shape, dtype=torch.float64)
    softmax = build_network(model_spec(**fields), shape, seed=0, dtype=torch.float64)
    assert relative_error(tangent_kernel(softmax, x), tangent_kernel(softmax, x, of="logits")) > 0.1
    linear = build_network(
        model_spec(**{**fields, "output_activation": "identity"}), shape, seed=0, dtype=torch.float64
    )
    assert torch.equal(tangent_kernel(linear, x), tangent_kernel(linear, x, of="logits"))


@pytest.mark.parametrize("case", ["mlp-bottleneck-softmax", "cnn-flatten-strided", "resnet-conv"])
def test_three_methods_agree_in_float32(case):
    fields, shape = CASES[case]
    net = build_network(model_spec(**fields), shape, seed=3)
    x = torch.randn(6, *shape, generator=torch.Generator().manual_seed(4))
    reference = tangent_kernel(build_network(model_spec(**fields), shape, seed=3, dtype=torch.float64), x.double())
    for method in METHODS:
        K = tangent_kernel(net, x, method=method)
        assert K.dtype == torch.float32
        assert relative_error(K, reference) < 1e-5, method


def test_conv_position_sum_path_equals_per_sample_path(monkeypatch):
    fields, shape = CASES["cnn-global-avg"]
    net = build_network(model_spec(**fields), shape, seed=0, dtype=torch.float64)
    x = torch.randn(4, *shape, dtype=torch.float64)
    per_sample = tangent_kernel(net, x, method="structured")
    monkeypatch.setattr(ntk, "MEMORY_BUDGET_BYTES", 1)
    position_sum = tangent_kernel(net, x, method="structured")
    assert relative_error(position_sum, per_sample) < 1e-12
    assert relative_error(position_sum, dense_reference_kernel(net, x, "outputs")) < 1e-10


def test_kernel_diagonal_is_the_squared_gradient_norm_and_row_index_is_i_times_O_plus_a():
    fields, shape = CASES["mlp-bottleneck-swish"]
    net = build_network(model_spec(**fields), shape, seed=0, dtype=torch.float64)
    x = torch.randn(3, *shape, dtype=torch.float64)
    K = tangent_kernel(net, x)
    i, a = 2, 1
    y = net.outputs(x[i : i + 1])[0, a]
    g = torch.autograd.grad(y, list(trainable_parameters(net).values()))
    assert K[i * 3 + a, i * 3 + a].item() == pytest.approx(sum(float((t * t).sum()) for t in g), rel=1e-12)


def test_auto_resolves_to_structured_for_built_networks_and_jacobian_for_foreign_modules():
    fields, shape = CASES["resnet-fc"]
    assert resolve_method(build_network(model_spec(**fields), shape, seed=0), "auto") == "structured"
    foreign = build_network(model_spec(**fields), shape, seed=0)
    foreign.readout = torch.nn.Linear(8, 2)
    assert resolve_method(foreign, "auto") == "jacobian"
    assert (
        resolve_method(foreign, "structured") == "structured"
    )  # the plain nn.Linear falls back to per-sample gradients
    with pytest.raises(ValueError, match="unknown kernel method"):
        resolve_method(foreign, "magic")


def test_spectrum_and_relative_change():
    Q, _ = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64))
    K = Q @ torch.diag(torch.tensor([0.5, 1.0, 2.0, 8.0], dtype=torch.float64)) @ Q.T
    lam_min, lam_max, cond = kernel_spectrum(K)
    assert (lam_min, lam_max, cond) == pytest.approx((0.5, 8.0, 16.0), rel=1e-12)
    assert kernel_spectrum(torch.zeros(3, 3))[2] == math.inf
    assert relative_change(2 * K, K) == pytest.approx(1.0, rel=1e-12)
    assert relative_change(K, K) == 0.0


@pytest.mark.parametrize("case", ["mlp-bottleneck-swish", "cnn-global-avg"])
def test_structured_kernel_reads_weight_and_bias_multipliers_from_the_layers(case):
    fields, shape = CASES[case]
    net = build_network(model_spec(**fields), shape, seed=0, dtype=torch.float64)
    net.stages[0].layer.bias_multiplier = 3.0
    net.stages[1].layer.weight_multiplier *= 0.5
    x = torch.randn(3, *shape, dtype=torch.float64)
    reference = dense_reference_kernel(net, x, "outputs")
    for method in METHODS:
        assert relative_error(tangent_kernel(net, x, method=method), reference) < 1e-10, method


BENCH_ROWS = {row["name"]: row for row in method_rows(quick=False)}


@pytest.mark.slow
@pytest.mark.parametrize("block_rows", [640, 4])
@pytest.mark.parametrize("name", list(BENCH_ROWS))
def test_every_method_and_auto_agree_in_float64_on_the_bench_networks(name, block_rows, monkeypatch):
    """bench_kernels' method rows at n = 2 (MLPs) or 3 points, against the dense Jacobian; block_rows = 4 cuts every
    Gram into blocks of whole points (one point per block at O = 10: the mirrored lower blocks are exercised)."""
    monkeypatch.setattr(symmetric_gram, "BLOCK_ROWS", block_rows)
    row = BENCH_ROWS[name]
    n = 2 if row["net"] == "mlp" else 3
    net, x = method_row_network(row, torch.float64), method_row_inputs(row, n, torch.float64)
    reference = dense_reference_kernel(net, x, "logits")
    for method in (*METHODS, "auto"):
        K = tangent_kernel(net, x, method=method, of="logits")
        assert K.dtype == torch.float64
        assert relative_error(K, reference) < 1e-10, method


def test_auto_profiles_a_network_once_and_again_after_a_layer_is_swapped():
    fields, shape = CASES["resnet-fc"]
    net = build_network(model_spec(**fields), shape, seed=0)
    x = torch.randn(4, *shape)
    forwards = []
    net.register_forward_hook(lambda *_: forwards.append(1))
    costs = ntk.kernel_costs(net, x)
    assert resolve_method(net, "auto", x) == "structured" and len(forwards) == 1
    assert ntk.kernel_costs(net, x) == costs and len(forwards) == 1
    net.readout = torch.nn.Linear(8, 2)
    assert ntk.kernel_costs(net, x)["structured"].flops > costs["structured"].flops  # the readout is now a fallback
    assert len(forwards) == 2
