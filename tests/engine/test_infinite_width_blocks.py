"""The convolution and relu maps on blocks of pairs against dense references written from the formulas.

A convolution's map is (1/k²) Σ_δ U_δ M U_δᵀ with U_δ [P', P] the 0/1 matrix that reads offset δ of
each output's window (torch's unfold of the identity, so zero padding and strides are torch's own);
relu's is the arc-cosine kernel. Chained in the bench's relu CNN with global average pooling they
give Θ∞ and Σ∞ by plain matrix products over the whole [n, n, P, P] tensor, the way the maps were
computed before they ran on blocks.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ntklab.api_schemas.spec import model_spec
from ntklab.engine.limits import pair_blocks
from ntklab.engine.limits.diagonal_windows import DiagonalWindow
from ntklab.engine.limits.infinite_width import limit_kernels
from ntklab.engine.torch_threads import torch_threads


def window_reads(grid: tuple[int, int], k: int, stride: int, padding: int) -> torch.Tensor:
    """U [k², P', P]: U[δ, o, p] = 1 where input p sits at offset δ of output o's window."""
    height, width = grid
    basis = torch.eye(height * width, dtype=torch.float64).reshape(height * width, 1, height, width)
    columns = F.unfold(basis, k, padding=padding, stride=stride)  # [P, k², P']
    return columns.permute(1, 2, 0)


def reference_window_mean(M: torch.Tensor, grid, k: int, stride: int, padding: int) -> torch.Tensor:
    U = window_reads(grid, k, stride, padding)
    return torch.einsum("dop,...pq,deq->...oe", U, M, U) / k**2


@pytest.mark.parametrize(
    ("grid", "k", "stride", "padding"),
    [
        ((8, 8), 3, 1, 1),
        ((5, 6), 3, 1, 1),
        ((6, 6), 5, 1, 2),
        ((4, 4), 1, 1, 0),  # the grid kept: masked shifts
        ((4, 4), 3, 2, 1),
        ((5, 5), 2, 1, 0),
        ((7, 5), 3, 2, 0),
        ((4, 4), 1, 2, 0),
        ((5, 6), 3, 1, 2),  # strided slices
    ],
)
def test_the_window_mean_is_the_sum_of_window_reads(grid, k, stride, padding):
    positions = math.prod(grid)
    M = torch.randn(7, positions, positions, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    window = DiagonalWindow(grid, k, stride, padding)
    expected = reference_window_mean(M, grid, k, stride, padding)
    assert window.out == tuple(
        F.conv2d(torch.zeros(1, 1, *grid), torch.zeros(1, 1, k, k), stride=stride, padding=padding).shape[-2:]
    )
    torch.testing.assert_close(window.mean(M), expected, rtol=1e-14, atol=1e-14)


def arc_cosine(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """E[relu(u) relu(v)], E[relu'(u) relu'(v)] for (u, v) ~ N(0, [[a, c], [c, b]]) (Cho & Saul 2009)."""
    norm = torch.sqrt(a * b)
    theta = torch.arccos((c / norm).clamp(-1, 1))
    return norm / (2 * math.pi) * (torch.sin(theta) + (math.pi - theta) * torch.cos(theta)), (math.pi - theta) / (
        2 * math.pi
    )


def reference_relu_cnn(x: torch.Tensor, depth: int, side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Θ∞, Σ∞ [n, n] of `depth` × (3×3 same conv with bias, relu), global average pooling, dense readout with
    bias, ntk parameterization (ρ = 1, β = 1), on one-channel side×side images x [n, side²]."""
    n = x.shape[0]
    K = torch.einsum("ip,jq->ijpq", x, x)
    Θ = torch.zeros_like(K)
    for _ in range(depth):
        K = reference_window_mean(K, (side, side), 3, 1, 1) + 1
        Θ = K + reference_window_mean(Θ, (side, side), 3, 1, 1)
        variance = torch.einsum("iipp->ip", K)
        E, Edot = arc_cosine(variance[:, None, :, None], variance[None, :, None, :], K)
        K, Θ = E, Edot * Θ
    K, Θ = K.mean((-1, -2)), Θ.mean((-1, -2))
    assert K.shape == (n, n)
    return K + 1 + Θ, K + 1


@pytest.mark.parametrize("block_entries", [1, 5000, 1 << 16, 1 << 30])
def test_the_relu_cnn_on_blocks_equals_the_dense_maps(monkeypatch, block_entries):
    """Any block size (one pair a block, blocks that end inside a row, one block) gives the dense reference's
    Θ∞ and Σ∞ to 1e-12: the bench's network, n = 9."""
    monkeypatch.setattr(pair_blocks, "BLOCK_ENTRIES", block_entries)
    x = torch.randn(9, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    model = model_spec(kind="cnn", hidden=[16] * 3, activation="relu", output_dim=1, input_shape=[1, 8, 8])
    limit = limit_kernels(model, x)
    theta, sigma = reference_relu_cnn(x, 3, 8)
    torch.testing.assert_close(limit.ntk, theta, rtol=1e-12, atol=0)
    torch.testing.assert_close(limit.nngp, sigma, rtol=1e-12, atol=0)


@pytest.fixture
def two_threads():
    with torch_threads(2):
        yield


def test_the_relu_cnn_on_two_threads_equals_the_dense_maps(two_threads):
    """The blocks spread over two threads (each writing its own pairs and their mirrors) give the same kernels."""
    x = torch.randn(12, 64, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    model = model_spec(kind="cnn", hidden=[16] * 3, activation="relu", output_dim=1, input_shape=[1, 8, 8])
    limit = limit_kernels(model, x)
    theta, sigma = reference_relu_cnn(x, 3, 8)
    assert torch.get_num_threads() == 2
    torch.testing.assert_close(limit.ntk, theta, rtol=1e-12, atol=0)
    torch.testing.assert_close(limit.nngp, sigma, rtol=1e-12, atol=0)


def test_pair_blocks_cover_every_pair_once_with_their_mirrors():
    """Every pair (i, j ≥ i) is computed by one block (the pairs j < i are the mirrors' to fill) where a block
    holds less than a row, else every pair by one block of whole rows."""
    for n, per_pair in [(5, 1), (7, 5000), (64, 8192), (3, 1 << 20), (9, 1 << 16)]:
        computed = torch.zeros(n, n, dtype=torch.long)
        for block in pair_blocks.pair_blocks(n, per_pair):
            computed[block.rows, block.cols] += 1
        mirrored = any(block.mirrored for block in pair_blocks.pair_blocks(n, per_pair))
        expected = torch.ones(n, n, dtype=torch.long).triu() if mirrored else torch.ones(n, n, dtype=torch.long)
        assert computed.equal(expected), (n, per_pair)


def test_a_mirrored_block_fills_the_transposed_pairs():
    M = torch.randn(6, 6, 3, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    M = M + M.permute(1, 0, 3, 2)  # M[j, i] = M[i, j]ᵀ
    filled = torch.full_like(M, math.nan)
    blocks = pair_blocks.pair_blocks(6, 1 << 14)  # 2 pairs a block: mirrored rows
    assert all(block.mirrored for block in blocks)
    pair_blocks.run_blocks(lambda block: block.view(filled).copy_(block.view(M)), blocks, (filled,))
    assert filled.equal(M)


def test_a_residual_block_on_images_equals_the_dense_maps():
    """conv, relu, residual[conv, relu, conv] (scale ½), global average pooling, dense readout against the dense
    maps: the blocked maps write over their input, so the skip must not see the branch's work. The branch ends
    in a weight layer (mean 0), so K = K_skip + s²·K_branch and Θ = Θ_skip + s²·Θ_branch."""
    x = torch.randn(5, 36, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    conv = {"type": "conv2d", "width": 8}
    relu = {"type": "activation", "name": "relu"}
    residual = {"type": "residual", "scale": 0.5, "layers": [conv, relu, conv]}
    layers = [conv, relu, residual, {"type": "global_avg_pool"}]
    model = model_spec(kind="graph", input_shape=[1, 6, 6], output_dim=1, layers=layers)

    def conv_map(K, Θ):
        K = reference_window_mean(K, (6, 6), 3, 1, 1) + 1
        return K, K + reference_window_mean(Θ, (6, 6), 3, 1, 1)

    def relu_map(K, Θ):
        variance = torch.einsum("iipp->ip", K)
        E, Edot = arc_cosine(variance[:, None, :, None], variance[None, :, None, :], K)
        return E, Edot * Θ

    K = torch.einsum("ip,jq->ijpq", x, x)
    K_skip, Θ_skip = relu_map(*conv_map(K, torch.zeros_like(K)))
    K_branch, Θ_branch = conv_map(*relu_map(*conv_map(K_skip, Θ_skip)))
    K, Θ = (K_skip + K_branch / 4).mean((-1, -2)), (Θ_skip + Θ_branch / 4).mean((-1, -2))
    limit = limit_kernels(model, x)
    torch.testing.assert_close(limit.ntk, K + 1 + Θ, rtol=1e-12, atol=0)
    torch.testing.assert_close(limit.nngp, K + 1, rtol=1e-12, atol=0)
