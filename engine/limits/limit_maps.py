"""The infinite-width layer maps: how each layer transforms the limits of a representation's moments.

A representation h(x) has C channels (units) at P positions (P = 1 for a vector, T tokens, H·W
pixels). As every width → ∞ the channels are i.i.d. and only channel averages survive; on the
probe points x_1…x_n the state (Moments) holds, in float64,

    K  [n, n, P, P]  (1/C) Σ_c h_c(x_i)[p] h_c(x_j)[q]                 the second moment (NNGP when Gaussian)
    Θ  [n, n, P, P]  Σ_w ∂_w h_c(x_i)[p] · ∂_w h_c(x_j)[q]             one unit's tangent kernel (any c)
    μ  [n, P]        (1/C) Σ_c h_c(x_i)[p]                              the mean over units

A weight layer z = c·W h + β·b with W ~ N(0, std²), c·std = 1/√fan_in, b ~ N(0, 1), β = 1
(engine/nets/parameterization.py) and ρ = c²·fan_in (1 under ntk, fan_in under standard):

    dense      K' = K + [b],           Θ' = (ρ·K + [b])·[trainable] + Θ             per position
    conv k×k   K'[p,q] = (1/k²) Σ_δ K[sp+δ, sq+δ] + [b],   Θ'[p,q] = ρ·that + [b] + (1/k²) Σ_δ Θ[sp+δ, sq+δ]
               (zero padding: out-of-range positions hold 0; Arora et al. 2019's CNTK)
    activation K' = E[σ(u)σ(v)],  Θ' = E[σ'(u)σ'(v)]·Θ,  μ' = E[σ(u)],  (u, v) ~ N(0, [[K_ii[p,p], K_ij[p,q]], [·, K_jj[q,q]]])
               (engine/limits/gauss_hermite.py); on the deterministic input σ is applied to the values
    avg pool   a linear map L [P', P] of positions:  K' = L K Lᵀ,  Θ' = L Θ Lᵀ,  μ' = L μ
               (global average pooling: L = 1ᵀ/P)
    flatten    marks the positions as features: the next dense layer reads (1/P) Σ_p K[p,p]
    residual   h ↦ skip(h) + s·branch(h) with branch units independent of the skip's:
               K' = K_skip + s²·K_br + s·(μ_skip ⊗ μ_br + μ_br ⊗ μ_skip),  Θ' = Θ_skip + s²·Θ_br,  μ' = μ_skip + s·μ_br

The conv and closed-form activation maps work block by block of pairs (engine/limits/pair_blocks.py:
each pair's [P, P] matrices depend on that pair alone, and the activation's on the two points'
variances), so their temporaries stay in cache, each unordered pair is computed once and the blocks
share the cores; the convolution's window sums are engine/limits/diagonal_windows.py's. Those two maps
write their output over their input's K and Θ where the shapes allow (each block reads its pairs before
it writes them, and the mirrors land on pairs no block reads): **a map consumes its input state**, and
a caller that needs the input again maps a copy (Moments.copy). Fresh [n, n, P, P] tensors cost their
page faults (≈ 0.1 s for 134 MB on the bench machine, as much as the map's arithmetic), and half the memory.

The input starts as its own values (K from the data, Θ = 0); the readout is a dense layer on
the final vector, whose K and Θ are Σ∞ and Θ∞ (the logits' limits are Σ∞ ⊗ I_O and Θ∞ ⊗ I_O).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from ntklab.engine.limits import gauss_hermite
from ntklab.engine.limits.diagonal_windows import DiagonalWindow
from ntklab.engine.limits.pair_blocks import PairBlock, pair_blocks, run_blocks
from ntklab.engine.nets.activations import hidden_activation


@dataclass(frozen=True)
class Moments:
    """K, Θ [n, n, P, P], μ [n, P] on a grid of positions (() vector, (T,) tokens, (H, W) image).

    values [n, C, P]: the representation itself while it is still a function of the input alone.
    gaussian: the units are jointly Gaussian (a weight layer's output, or a linear map of one).
    flat: positions flattened into features. error: the largest quadrature error estimate so far.
    """

    K: Tensor
    Θ: Tensor
    μ: Tensor
    grid: tuple[int, ...]
    values: Tensor | None = None
    gaussian: bool = False
    flat: bool = False
    error: float = 0.0

    def copy(self) -> Moments:
        """The same moments in K and Θ of their own, for a map that consumes its input (module docstring)."""
        return replace(self, K=self.K.clone(), Θ=self.Θ.clone())


def of_input(x: Tensor, grid: tuple[int, ...]) -> Moments:
    """The moments of the input values x [n, C, P] (channels first, positions flattened)."""
    return _from_values(x.to(torch.float64), grid, error=0.0)


def _from_values(values: Tensor, grid: tuple[int, ...], *, error: float) -> Moments:
    n, channels, _ = values.shape
    K = torch.einsum("icp,jcq->ijpq", values, values).contiguous().div_(channels)  # contiguous: the maps' blocks
    return Moments(K, torch.zeros_like(K), values.mean(dim=1), grid, values=values, error=error)


def dense(state: Moments, *, rho: float, bias: bool, trainable: bool = True) -> Moments:
    """z = c·W h + b on the features (each position alone); a flattened state is read as one vector."""
    state = _collapse(state) if state.flat else state
    K, Θ = state.K, state.Θ
    return Moments(
        K + float(bias),
        (rho * K + float(bias)) * trainable + Θ,
        torch.zeros_like(state.μ),
        state.grid,
        gaussian=True,
        error=state.error,
    )


def conv(state: Moments, *, kernel_size: int, stride: int, padding: int, rho: float, bias: bool) -> Moments:
    """z = c·(W ⋆ h) + b: the window average of K and Θ over the same offset δ at both positions,
    block by block of pairs (pair_blocks.py); over the input's K and Θ where the grid is kept."""
    window = DiagonalWindow(state.grid, kernel_size, stride, padding)
    n, positions = state.K.shape[0], math.prod(window.out)
    K_in, Θ_in = state.K.contiguous(), state.Θ.contiguous()
    K, Θ = (
        (K_in, Θ_in)
        if positions == K_in.shape[-1]
        else (K_in.new_empty(n, n, positions, positions), K_in.new_empty(n, n, positions, positions))
    )

    def work(block: PairBlock) -> None:
        K_block = window.mean(block.view(K_in))
        torch.add(K_block, float(bias), out=block.view(K))
        torch.add(K_block.mul_(rho).add_(float(bias)), window.mean(block.view(Θ_in)), out=block.view(Θ))

    run_blocks(work, pair_blocks(n, state.K.shape[-1] ** 2 + positions**2), (K, Θ))
    return Moments(K, Θ, state.μ.new_zeros(state.μ.shape[0], positions), window.out, gaussian=True, error=state.error)


def pool(state: Moments, L: Tensor, grid: tuple[int, ...]) -> Moments:
    """A linear map of positions, L [P', P]: K' = L K Lᵀ, Θ' = L Θ Lᵀ, μ' = L μ; values pooled alike."""
    K, Θ = L @ state.K @ L.T, L @ state.Θ @ L.T
    values = None if state.values is None else state.values @ L.T
    return Moments(K, Θ, state.μ @ L.T, grid, values=values, gaussian=state.gaussian, error=state.error)


def avg_pool_operator(
    grid: tuple[int, int], kernel_size: int, stride: int, padding: int, device
) -> tuple[Tensor, tuple[int, int]]:
    """L [H'·W', H·W] of torch's avg_pool2d (zero padding counted in the mean), and the output grid."""
    height, width = grid
    basis = torch.eye(height * width, dtype=torch.float64, device=device).reshape(height * width, 1, height, width)
    pooled = F.avg_pool2d(basis, kernel_size, stride, padding)
    return pooled.reshape(height * width, -1).T.contiguous(), tuple(pooled.shape[-2:])


def global_pool_operator(positions: int, device) -> Tensor:
    """L = 1ᵀ/P [1, P]: the mean over positions."""
    return torch.full((1, positions), 1.0 / positions, dtype=torch.float64, device=device)


def flatten(state: Moments) -> Moments:
    """Positions become features; element-wise maps still act per position, a dense layer reads the mean diagonal."""
    return state if state.K.shape[-1] == 1 else replace(state, flat=True)


def _collapse(state: Moments) -> Moments:
    """A flattened state as one vector: K = (1/P) Σ_p K[p,p], likewise Θ, μ averaged."""
    K = state.K.diagonal(dim1=2, dim2=3).mean(-1)[..., None, None]
    Θ = state.Θ.diagonal(dim1=2, dim2=3).mean(-1)[..., None, None]
    return Moments(K, Θ, state.μ.mean(-1, keepdim=True), (), gaussian=False, error=state.error)


def activation(state: Moments, name: str, *, tolerance: float) -> Moments:
    """σ element-wise: exact on the input's values, else the Gaussian expectations of gauss_hermite.py."""
    if state.values is not None:
        return replace(
            _from_values(hidden_activation(name)(state.values), state.grid, error=state.error), flat=state.flat
        )
    if not state.gaussian:
        raise ValueError(f"activation {name!r} acts on units that are not Gaussian in the limit")
    variance = torch.einsum("iipp->ip", state.K).clamp_min(0.0)  # [n, P]
    mean = gauss_hermite.closed_form_mean(name, variance)
    if mean is not None:
        return Moments(
            *_closed_form_blocks(name, variance, state.K, state.Θ), mean, state.grid, flat=state.flat, error=state.error
        )
    E, Edot, mean, error = gauss_hermite.layer_expectations(name, variance, state.K, tolerance=tolerance)
    return Moments(E, Edot * state.Θ, mean, state.grid, flat=state.flat, error=max(state.error, error))


def _closed_form_blocks(name: str, variance: Tensor, K: Tensor, Θ: Tensor) -> tuple[Tensor, Tensor]:
    """E[σ(u)σ(v)] and E[σ'(u)σ'(v)]·Θ [n, n, P, P] by the closed form, block by block of pairs (pair_blocks.py),
    over K and Θ; pair (i, j) has the variances [P] of points i and j."""
    n, positions = variance.shape
    K, Θ = K.contiguous(), Θ.contiguous()  # written over: each block reads its pairs before it writes them

    def work(block: PairBlock) -> None:
        rows, cols = variance[block.rows], variance[block.cols]
        first = rows.repeat_interleave(len(cols), dim=0)[:, :, None]  # [m, P, 1]
        second = cols.repeat(len(rows), 1)[:, None, :]  # [m, 1, P]
        value, slope = gauss_hermite.closed_form(name, first, second, block.view(K))
        block.view(Θ).mul_(slope)  # before K's block: the slope may be that block itself
        block.view(K).copy_(value)

    run_blocks(work, pair_blocks(n, positions**2), (K, Θ))
    return K, Θ


def residual(skip: Moments, branch: Moments, scale: float) -> Moments:
    """skip + s·branch with independent units: the second moments add, plus the products of the means."""
    if skip.flat or branch.flat or skip.K.shape != branch.K.shape:
        raise ValueError("a residual's skip and branch must have the same positions, unflattened")
    cross = skip.μ[:, None, :, None] * branch.μ[None, :, None, :]
    K = skip.K + scale**2 * branch.K + scale * (cross + cross.permute(1, 0, 3, 2))
    return Moments(
        K,
        skip.Θ + scale**2 * branch.Θ,
        skip.μ + scale * branch.μ,
        branch.grid,
        gaussian=skip.gaussian and branch.gaussian,
        error=max(skip.error, branch.error),
    )
