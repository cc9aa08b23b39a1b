"""Θ∞ against the finite networks themselves: the average of empirical tangent kernels over many seeds
(autograd Jacobians, float64) approaches Θ∞ like m^−½, and one network's distance falls like m^−½ (the theory).

A wrong limit — a missed bias, a wrong ρ, a wrong window or pooling map, a residual's mean term —
leaves an error that stops falling with width, which these tests would see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from ntklab.api_schemas.spec import AnyModel, model_spec
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.limits.infinite_width import kernel_inf_distance, limit_kernels
from ntklab.engine.nets.network import build_network


def empirical(model: AnyModel, x: torch.Tensor, seed: int) -> torch.Tensor:
    net = build_network(model, tuple(x.shape[1:]), seed=seed, dtype=torch.float64)
    return tangent_kernel(net, x, method="jacobian", of="logits")


@dataclass
class MonteCarlo:
    """Over S seeds, relative to ‖Θ∞ ⊗ I‖_F: rms = √(mean_s ‖K_s − Θ∞⊗I‖²) (= √(‖E K − Θ∞⊗I‖² + E‖K − E K‖²),
    so it falls like m^−½ only if E K → Θ∞), the error of the seed average ‖K̄ − Θ∞⊗I‖ and its standard error
    √(Σ_entries var(K)/S)."""

    rms: float
    average_error: float
    standard_error: float


def monte_carlo(model: AnyModel, x: torch.Tensor, seeds: int) -> MonteCarlo:
    theta = limit_kernels(model, x).ntk
    K = torch.stack([empirical(model, x, seed) for seed in range(seeds)])
    outputs = K.shape[-1] // len(theta)
    limit = torch.kron(theta, torch.eye(outputs, dtype=torch.float64))
    scale = torch.linalg.norm(limit)
    rms = torch.sqrt(((K - limit) ** 2).sum((1, 2)).mean()) / scale
    standard_error = torch.sqrt(K.var(0).sum() / seeds) / scale
    return MonteCarlo(rms.item(), kernel_inf_distance(K.mean(0), theta), standard_error.item())


def slope(widths, values) -> float:
    return float(np.polyfit(np.log(widths), np.log(values), 1)[0])


def points(n: int, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    return torch.randn(n, math.prod(shape), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.slow
@pytest.mark.parametrize("activation,parameterization", [("tanh", "ntk"), ("relu", "standard")])
def test_the_seed_average_approaches_theta_inf_like_m_to_the_minus_half(activation, parameterization):
    """Two hidden layers with biases over a 16× range of widths, 12 seeds each: the rms distance has slope −½,
    and at the wider widths the seed average sits within 3 standard errors of Θ∞."""
    x = points(6, (3,))
    widths = [32, 64, 128, 256, 512]
    runs = [
        monte_carlo(
            model_spec(hidden=[m, m], activation=activation, parameterization=parameterization, output_dim=2), x, 12
        )
        for m in widths
    ]
    assert -0.65 <= slope(widths, [r.rms for r in runs]) <= -0.35, runs
    assert all(r.average_error <= 3 * r.standard_error for r in runs[-2:]), runs


ARCHITECTURES = {
    "cnn, global average pool": lambda m: model_spec(
        kind="cnn", hidden=[m, m], activation=["relu", "erf"], input_shape=[2, 4, 4], output_dim=1
    ),
    "cnn, flatten, stride 2": lambda m: model_spec(
        kind="cnn", hidden=[m], activation="gelu", input_shape=[2, 4, 4], readout="flatten", stride=2, output_dim=1
    ),
    "fc resnet": lambda m: model_spec(kind="resnet", hidden=[m, m, m], blocks=2, activation="relu", output_dim=1),
    "conv resnet": lambda m: model_spec(
        kind="resnet", block="conv", hidden=[m, m], blocks=1, activation="relu", input_shape=[2, 4, 4], output_dim=1
    ),
    "graph: pool, projected residual, flatten": lambda m: model_spec(
        kind="graph",
        input_shape=[2, 4, 4],
        output_dim=1,
        layers=[
            {"type": "conv2d", "width": m},
            {"type": "activation", "name": "relu"},
            {"type": "avg_pool", "kernel_size": 2},
            {
                "type": "residual",
                "layers": [{"type": "conv2d", "width": m, "stride": 2}, {"type": "activation", "name": "swish"}],
            },
            {"type": "flatten"},
            {"type": "dense", "width": m},
            {"type": "activation", "name": "tanh"},
            {
                "type": "residual",
                "scale": 0.5,
                "layers": [{"type": "dense", "width": m}, {"type": "activation", "name": "relu"}],
            },
        ],
    ),
    "graph: tokens, dense per token, mean over tokens": lambda m: model_spec(
        kind="graph",
        input_shape=[3, 2],
        output_dim=1,
        bias=False,
        layers=[
            {"type": "activation", "name": "tanh"},
            {"type": "dense", "width": m},
            {"type": "activation", "name": "sigmoid"},
            {"type": "global_avg_pool"},
        ],
    ),
}


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_every_supported_architecture_approaches_its_limit(name):
    """From width 16 to 256 the rms distance falls by at least 2× (theory: 4×, less the narrow net's O(1/m) bias;
    a wrong limit would leave a floor), and the 8-seed average at 256
    sits within 3 standard errors of Θ∞."""
    build = ARCHITECTURES[name]
    x = points(3, (32,) if "tokens" not in name and "fc" not in name else (6,))
    narrow, wide = monte_carlo(build(16), x, 8), monte_carlo(build(256), x, 8)
    assert wide.rms < narrow.rms / 2, (narrow, wide)
    assert wide.average_error <= 3 * wide.standard_error, wide


def test_one_network_s_distance_at_init_falls_like_m_to_the_minus_half():
    """The theory at small scale: kernel_inf_distance at w₀ of single networks (its mean over 6 seeds at each
    width is fitted) has slope −½ in the width."""
    x = points(6, (4,))
    widths = [64, 128, 256, 512, 1024]

    def model(m):
        return model_spec(hidden=[m], activation="tanh", output_dim=1)

    theta = limit_kernels(model(1), x).ntk  # under ntk Θ∞ does not depend on the width
    distances = [
        np.mean([kernel_inf_distance(empirical(model(m), x, seed), theta) for seed in range(6)]) for m in widths
    ]
    assert -0.6 <= slope(widths, distances) <= -0.4, distances
