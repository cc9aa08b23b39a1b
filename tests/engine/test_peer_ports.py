"""The peers bench's ports compute ntklab's function (bench/peers: nt_export, vit_function, nn_copies), without JAX.

neural-tangents only runs in the bench's .venv-jax, so its side is checked here in numpy: the
exported arrays evaluated with stax's semantics (Dense: (W_std/√fan_in)·x W + b_std·b with W
[in, out]; Conv: the same over 3×3 "SAME" patches with W [k, k, in, out] on NHWC images; global
average pooling over H, W), and vit_function.vit_logits with numpy and scipy's erf, against the
torch network's logits in float64. The nngeometry copies likewise. The bench itself compares
the kernels in float64 (bench/peers/ntk.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import torch

from bench.peers.nn_copies import sequential_copy, vit_copy
from bench.peers.nt_export import sequential_problem, vit_problem
from bench.peers.ntk import ROWS, cnn, vit
from bench.peers.vit_function import vit_arguments, vit_logits
from ntklab.api_schemas.spec import model_spec
from ntklab.engine.nets.network import build_network


def _small_ntk_cnn(dtype: torch.dtype) -> tuple[torch.nn.Module, torch.Tensor]:
    """c = 1/√fan_in ≠ 1 on every layer, so the W_std = c·√fan_in mapping is exercised beyond c = 1."""
    spec = model_spec(kind="cnn", hidden=[4, 5], activation="tanh", output_dim=3, parameterization="ntk")
    net = build_network(spec, (1, 8, 8), seed=3, dtype=dtype)
    return net, torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(4), dtype=dtype)


SEQUENTIAL = {row.label: row.build for row in ROWS if row.export is sequential_problem} | {
    "small ntk-parameterized CNN": _small_ntk_cnn
}


def _stax_forward(problem: dict) -> np.ndarray:
    """stax.serial's apply_fn of the exported layers, in numpy."""
    activation = {"tanh": np.tanh, "relu": lambda z: np.maximum(z, 0.0)}[problem["activation"]]
    h = problem["x"]
    for l in range(problem["layers"]):
        W, b, kind = problem[f"W{l}"], problem[f"b{l}"], problem[f"kind{l}"]
        if l == problem["layers"] - 1 and problem["pool"] == "global_avg":
            h = h.mean(axis=(1, 2))
        fan_in = math.prod(W.shape[:-1])
        z = _conv_same(h, W) if kind == "conv" else h @ W
        h = problem[f"W_std{l}"] / math.sqrt(fan_in) * z + problem[f"b_std{l}"] * b
        if l < problem["layers"] - 1:
            h = activation(h)
    return h


def _conv_same(x: np.ndarray, W: np.ndarray) -> np.ndarray:
    """x [n, H, W, C] ⋆ W [k, k, C, C'] with zero "SAME" padding, stride 1 (cross-correlation, as lax.conv)."""
    k, (H, Wd) = W.shape[0], x.shape[1:3]
    padded = np.pad(x, ((0, 0), (k // 2, k // 2), (k // 2, k // 2), (0, 0)))
    return sum(padded[:, i : i + H, j : j + Wd, :] @ W[i, j] for i in range(k) for j in range(k))


@pytest.mark.parametrize("name", SEQUENTIAL)
def test_sequential_export_is_the_same_function_in_stax_layout(name):
    net, x = SEQUENTIAL[name](torch.float64)
    x = x[:6]
    ours = net(x).detach().numpy()
    np.testing.assert_allclose(_stax_forward(sequential_problem(net, x)), ours, rtol=0, atol=1e-12 * np.abs(ours).max())


def test_vit_function_is_the_torch_vit():
    net, x = vit(torch.float64)
    x = x[:4]
    problem = vit_problem(net, x)
    params, scales = vit_arguments(problem)
    theirs = vit_logits(params, problem["x"], scales=scales, xp=np, erf=scipy.special.erf, heads=problem["heads"])
    ours = net(x).detach().numpy()
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-12 * np.abs(ours).max())


def test_vit_function_differentiates_every_torch_parameter():
    """vit_problem exports each torch parameter once, so neural-tangents' kernel sums over the same parameters."""
    net, x = vit(torch.float64)
    params, scales = vit_arguments(vit_problem(net, x[:2]))
    assert sorted(params) == sorted(name for name, _ in net.named_parameters())
    assert all(np.shape(params[name]) == tuple(p.shape) for name, p in net.named_parameters())
    assert set(scales) == {"patch", *(f"blocks.0.{m}" for m in ("q", "k", "v", "o", "fc1", "fc2")), "readout"}


@pytest.mark.parametrize("build", [cnn, vit], ids=["cnn", "vit"])
def test_nngeometry_copy_is_the_same_function(build):
    net, x = build(torch.float64)
    copy = sequential_copy(net) if build is cnn else vit_copy(net)
    torch.testing.assert_close(copy(x[:6]), net(x[:6]), rtol=0, atol=1e-12)
