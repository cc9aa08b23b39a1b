"""Structured rules for parameters read directly by one call (layer_capture.DirectUse, kernel_rules.add_direct_kernel).

A LayerNorm / RMSNorm affine scale γ and shift β, an additive positional table, a broadcast vector and an
expanded class token are covered (no fallback parameter), and the structured kernel equals the dense
J Jᵀ of torch.func's Jacobian in float64 to 1e-10, with one output and with several; a table sliced before
use, one read twice, one also used elsewhere or one whose output is modified in place stays a fallback parameter
and still agrees.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, jacrev

from bench.bench_kernels import method_row_inputs, method_row_network, method_rows
from ntklab.engine.kernels import kernel_cost
from ntklab.engine.kernels.layer_capture import capture
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.nets.graph_layers import LayerNorm as GraphLayerNorm
from ntklab.engine.nets.layers import ScaledLinear
from ntklab.engine.nets.network import trainable_parameters

F64 = torch.float64
T, D_IN, D = 5, 3, 6


def linear(fan_in, out):
    return ScaledLinear(fan_in, out, bias=True, weight_multiplier=1 / math.sqrt(fan_in), dtype=F64)


class Tokens(nn.Module):
    """x [n, T, 3] -> ScaledLinear -> `mix` (the parameters under test) -> tanh -> mean over tokens -> readout [n, O]."""

    def __init__(self, mix, out):
        super().__init__()
        self.embed, self.readout, self.mix = linear(D_IN, D), linear(D, out), mix
        self.head = "identity"

    def forward(self, x):
        return self.readout(torch.tanh(self.mix(self.embed(x))).mean(dim=1))


class Images(nn.Module):
    """x [n, 2, 4, 4] -> the graphs' channels-first LayerNorm (γ, β [2] at each pixel) -> tanh -> flatten -> readout."""

    def __init__(self, out):
        super().__init__()
        self.norm = GraphLayerNorm(2, affine=True, eps=1e-5, channels_first=True, dtype=F64, device="cpu")
        self.readout = linear(32, out)
        self.head = "identity"

    def forward(self, x):
        return self.readout(torch.tanh(self.norm(x)).flatten(1))


def with_parameters(**shapes):
    """A `mix` module holding parameters of the given shapes (drawn by `seeded`), for Tokens."""

    def build(forward):
        module = nn.Module()
        for name, shape in shapes.items():
            setattr(module, name, nn.Parameter(torch.empty(*shape, dtype=F64)))
        module.forward = lambda h: forward(module, h)
        return module

    return build


MIXES = {
    "layer_norm": lambda: nn.LayerNorm(D, dtype=F64),
    "rms_norm": lambda: nn.RMSNorm(D, dtype=F64),
    "positional table": lambda: with_parameters(P=(T, D))(lambda m, h: h + m.P),
    "table on the left, subtracted": lambda: with_parameters(P=(1, T, D))(lambda m, h: m.P - h),
    "broadcast vector": lambda: with_parameters(b=(D,))(lambda m, h: torch.add(h, m.b)),
    "class token": lambda: with_parameters(cls=(1, 1, D))(
        lambda m, h: torch.cat([m.cls.expand(h.shape[0], -1, -1), h], dim=1)
    ),
}

FALLING_BACK = {
    "sliced table": lambda: with_parameters(P=(T + 2, D))(lambda m, h: h + m.P[: h.shape[1]]),
    "table read twice": lambda: with_parameters(P=(T, D))(lambda m, h: h + m.P + m.P * h),
    "scale used outside layer_norm too": lambda: with_parameters(g=(D,))(
        lambda m, h: F.layer_norm(h, (D,), m.g, None) * m.g
    ),
    "sum modified in place": lambda: with_parameters(P=(T, D))(lambda m, h: (h + m.P).mul_(2.0)),
}


def seeded(net):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.normal_()
    return net


def dense_kernel(net, x):
    """J Jᵀ, J = jacrev of the flat-parameter map w ↦ vec(f(w; X)) ∈ R^{n·O}."""
    params = trainable_parameters(net)
    names, shapes, sizes = list(params), [p.shape for p in params.values()], [p.numel() for p in params.values()]
    w = torch.cat([p.detach().reshape(-1) for p in params.values()])

    def flat_outputs(w):
        unflat = {k: t.reshape(s) for k, t, s in zip(names, torch.split(w, sizes), shapes)}
        return functional_call(net, unflat, (x,)).reshape(-1)

    J = jacrev(flat_outputs)(w)
    return J @ J.T


def relative_error(K, reference):
    return float(torch.linalg.norm(K - reference) / torch.linalg.norm(reference))


def tokens(n):
    return torch.randn(n, T, D_IN, dtype=F64, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("out", [1, 3])
@pytest.mark.parametrize("mix", list(MIXES))
def test_a_directly_read_parameter_is_covered_and_its_kernel_is_the_dense_one(mix, out):
    net, x = seeded(Tokens(MIXES[mix](), out)), tokens(6)
    captured = capture(net, x, lambda y: y)
    assert captured.fallback == []
    assert sorted(name for use in captured.direct for name, _, _ in use.parts) == sorted(
        f"mix.{name}" for name, _ in net.mix.named_parameters()
    )
    K = tangent_kernel(net, x, method="structured", of="logits")
    assert relative_error(K, dense_kernel(net, x)) < 1e-10


@pytest.mark.parametrize("out", [1, 3])
def test_the_graphs_channels_first_layer_norm_is_covered(out):
    net = seeded(Images(out))
    x = torch.randn(5, 2, 4, 4, dtype=F64, generator=torch.Generator().manual_seed(2))
    captured = capture(net, x, lambda y: y)
    assert captured.fallback == [] and [[name for name, _, _ in u.parts] for u in captured.direct] == [
        ["norm.weight", "norm.bias"]
    ]
    assert relative_error(tangent_kernel(net, x, method="structured", of="logits"), dense_kernel(net, x)) < 1e-10


@pytest.mark.parametrize("mix", list(FALLING_BACK))
def test_a_table_sliced_read_twice_used_elsewhere_or_modified_falls_back_and_still_agrees(mix):
    net, x = seeded(Tokens(FALLING_BACK[mix](), 2)), tokens(4)
    assert capture(net, x, lambda y: y).fallback == [name for name, _ in net.named_parameters() if "mix." in name]
    assert relative_error(tangent_kernel(net, x, method="structured", of="logits"), dense_kernel(net, x)) < 1e-10


def test_the_profile_lists_a_layer_norm_as_a_norm_row_and_no_fallback():
    net, x = seeded(Tokens(MIXES["layer_norm"](), 3)), tokens(4)
    prof = kernel_cost.profile(net, x, lambda y: y)
    assert prof.p_fallback == 0
    assert kernel_cost.LayerShape("norm", T, 1, D, True, True) in prof.layers
    table = kernel_cost.profile(seeded(Tokens(MIXES["positional table"](), 3)), x, lambda y: y)
    assert kernel_cost.LayerShape("norm", 1, 1, T * D, False, True) in table.layers


def test_the_bench_vit_block_has_no_fallback_parameter():
    """The ViT row of bench_kernels' methods table: LayerNorms, positions and class token all by direct rules
    (tests/engine/test_kernel_methods.py checks every method and auto against the dense Jacobian on it)."""
    row = next(row for row in method_rows(quick=True) if row["net"] == "vit")
    net, x = method_row_network(row, F64), method_row_inputs(row, 3, F64)
    captured = capture(net, x, lambda y: y)
    assert captured.fallback == []
    assert len([name for use in captured.direct for name, _, _ in use.parts]) == 8
    assert relative_error(tangent_kernel(net, x, method="structured", of="logits"), dense_kernel(net, x)) < 1e-10
