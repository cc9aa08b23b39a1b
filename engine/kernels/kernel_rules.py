"""Structured rules: one scaled layer's share of the tangent kernel from its inputs and output cotangents.

A layer called k times in a forward pass (k = 1 usually; more under weight tying) at T
positions per call (tokens, or output pixels of a convolution) sees, for point i and
output a, inputs a_it ∈ R^in and cotangents g_iat = ∂f_a(x_i)/∂z_it ∈ R^out, t running over
all positions of all calls. Its weight gradient is c·Σ_t g_iat a_itᵀ and its bias gradient
β·Σ_t g_iat, so with rows r = i·O + a:

    dense (one call, x [n, in]):  K_W = c²·(A Aᵀ ⊗ 1_O 1_Oᵀ) ⊙ (G Gᵀ)                  [n·O, n·O]
    shared weight (ScaledLinear over positions, ScaledConv2d / ScaledConv1d on unfolded patches):
        K_W[r, s] = c² Σ_{t,u} (a_it·a_ju)(g_iat·g_jbu)
    embedding (z_it = c·E[tok_it]):
        K_E[r, s] = c² Σ_{t,u} [tok_it = tok_ju] (g_iat·g_jbu)
    grouped convolution (groups γ; a_igt the patch of group g's C/γ channels, g_iagt the
    cotangent of its C'/γ output channels): the shared-weight sum over each group,
        K_W[r, s] = c² Σ_g Σ_{t,u} (a_igt·a_jgu)(g_iagt·g_jbgu)
    bias:  K_b[r, s] = β² (Σ_t g_iat)·(Σ_u g_jbu)
    a parameter used directly (layer_capture.DirectUse: a normalisation's affine γ, β; an additive
    table; an expanded class token), z = its call's output [n, *z], d the factor (x̂ for γ, else 1):
        J_r = Σ over the axes P is broadcast along of g_ia ⊙ d_i   [n·O, numel P],   K_P = J Jᵀ
        (γ [C] of x̂ [n, T, C]: J_r = Σ_t g_iatc x̂_itc; a table P [T, C] added to every point: J_r = g_ia;
        the bias rule with T positions when d = 1), FLOPs 2·n·O·T·C + γ·2(nO)²·C per factor d ≠ 1

A shared weight or an embedding is computed one of two ways, whichever takes fewer FLOPs
(multiply-add = 2) — with in = fan-in (C·kh·kw for a convolution), out = output width, U =
distinct tokens among the n·T, b = bytes per number, B = memory budget:

    per-sample:    J_r = c Σ_t g_iat a_itᵀ, K = J Jᵀ, in chunks of output features (chunk·n·O·in·b ≤ B)
                   FLOPs 2·n·O·T·in·out + 2·(nO)²·in·out         (embedding: n·O·T·w + 2·(nO)²·U·w,
                                                                   J scattered into the U used rows)
    position sum:  Σ_{t,u} of the products above, in row chunks (rows·n·O²·T²·b ≤ B)
                   FLOPs 2·n²·T²·in + 2·n²·O²·T²·out + 2·n²·O²·T²   (embedding: n²T² + 2n²O²T²·w + 2n²O²T²)

(a grouped convolution: the counts of one group with in = C/γ·kh·kw, out = C'/γ; per-sample J by one
bmm over (point, group) in chunks of groups, n·(O·out·in + in·T + O·out·T)·b bytes a group; the
position sum group by group).
Per-sample is chosen when a single-feature chunk (n·O·in·b, or n·O·U·b) fits the budget and
its FLOPs are at most POSITION_SUM_SLOWDOWN = 8 times the position sum's: the position sum
makes and reduces n²·O²·T² products with einsums that run far below GEMM speed (measured
single-threaded on a 2-core EPYC: 3–15 GFLOP/s against 45–70 GFLOP/s for the per-sample
bmm and J Jᵀ), so its FLOPs count eight-fold (`rule_flops` reports them so weighted). The dense rule costs 2n²·in + 2(nO)²·out + 2(nO)² and a bias
n·O·T·out + 2(nO)²·out.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ntklab.engine.callbacks import Checkpoint, no_checkpoint
from ntklab.engine.kernels.symmetric_gram import add_gram, mirror
from ntklab.engine.nets.layers import ScaledConv1d, ScaledConv2d, ScaledEmbedding, ScaledLinear
from ntklab.planner.kernel_cost_model import (  # noqa: F401  (the FLOP counts, torch-free, shared with the service's estimate)
    POSITION_SUM_SLOWDOWN,
    bias_flops,
    dense_flops,
    embedding_flops,
    rule_flops,
    shared_weight_flops,
    use_per_sample,
)

RULE_LAYERS: tuple[type[nn.Module], ...] = (ScaledLinear, ScaledConv2d, ScaledConv1d, ScaledEmbedding)


def has_rule(module: nn.Module) -> bool:
    """True for exactly the scaled layer types (a subclass may change forward, so it has no rule)."""
    return type(module) in RULE_LAYERS


def layer_kernel(
    layer: nn.Module,
    inputs: list[Tensor],
    cotangents: list[Tensor],
    *,
    weight: bool,
    bias: bool,
    budget: int,
    checkpoint: Checkpoint = no_checkpoint,
) -> Tensor:
    """The layer's share of K, [n·O, n·O], from its calls: inputs[k] and cotangents[k] = ∂f/∂z_k [n, O, *z_k.shape[1:]];
    checkpoint() is called after each chunk."""
    n, O = cotangents[0].shape[:2]
    K = cotangents[0].new_zeros(n * O, n * O)
    add_layer_kernel(K, layer, inputs, cotangents, weight=weight, bias=bias, budget=budget, checkpoint=checkpoint)
    return mirror(K, O)


def add_layer_kernel(
    K: Tensor,
    layer: nn.Module,
    inputs: list[Tensor],
    cotangents: list[Tensor],
    *,
    weight: bool,
    bias: bool,
    budget: int,
    checkpoint: Checkpoint = no_checkpoint,
) -> Tensor:
    """K += the layer's share (layer_kernel) on the blocks on and above the diagonal at least
    (symmetric_gram.py: a sum of such terms is completed by one mirror()); returns K."""
    n, O = cotangents[0].shape[:2]
    if isinstance(layer, ScaledLinear) and len(inputs) == 1 and inputs[0].dim() == 2:
        return _add_dense_layer_kernel(K, layer, inputs[0], cotangents[0], weight=weight, bias=bias)
    G = positions_cotangents(layer, cotangents)
    if weight:
        c2 = layer.weight_multiplier**2
        if isinstance(layer, ScaledEmbedding):
            tokens = torch.cat([t.reshape(n, -1) for t in inputs], dim=1)
            _add_embedding_kernel(K, c2, tokens, G, budget, checkpoint)
        elif isinstance(layer, ScaledConv2d) and layer.groups > 1:
            columns = torch.cat([layer.columns(x) for x in inputs], dim=2)
            per_channel = torch.cat([g.reshape(n, O, g.shape[2], -1) for g in cotangents], dim=3)
            _add_grouped_conv_kernel(K, c2, columns, per_channel, layer.groups, budget, checkpoint)
        else:
            _add_shared_weight_kernel(K, c2, positions_inputs(layer, inputs), G, budget, checkpoint)
    if bias:
        add_gram(K, G.sum(dim=2).reshape(n * O, -1), O, alpha=layer.bias_multiplier**2)
    return K


def add_direct_kernel(K: Tensor, G: Tensor, parts: list[tuple[str, Tensor | None, tuple[int, ...]]]) -> Tensor:
    """G [n, O, *z] the cotangents of a direct use's output z; parts (name, factor d [n, *z] or None, per-point
    shape s): K += J Jᵀ with J [n·O, Σ numel s] the per-point gradients Σ_broadcast g_ia ⊙ d_i, one Gram for all parts
    (blocks on and above the diagonal); returns K."""
    n, O = G.shape[:2]
    columns = []
    for _, factor, shape in parts:
        product = G if factor is None else G * factor.unsqueeze(1)
        target = (n, O, *[1] * (G.dim() - 2 - len(shape)), *shape)
        columns.append(product.sum_to_size(target).reshape(n * O, -1))
    return add_gram(K, columns[0] if len(columns) == 1 else torch.cat(columns, dim=1), O)


def positions_inputs(layer: nn.Module, inputs: list[Tensor]) -> Tensor:
    """[n, T, in]: every call's inputs at every position (a convolution's unfolded patches, in = C·kh·kw)."""
    if isinstance(layer, ScaledConv2d):
        patches = [layer.patches(x) for x in inputs]
    else:
        patches = [x.reshape(x.shape[0], -1, x.shape[-1]) for x in inputs]
    return patches[0] if len(patches) == 1 else torch.cat(patches, dim=1)


def positions_cotangents(layer: nn.Module, cotangents: list[Tensor]) -> Tensor:
    """[n, O, T, out] in the order of positions_inputs (a convolution's z is [n, O, C', H', W'], or [n, O, C', L'])."""
    if isinstance(layer, ScaledConv2d):
        per_call = [g.flatten(3).transpose(2, 3) for g in cotangents]
    else:
        per_call = [g.reshape(*g.shape[:2], -1, g.shape[-1]) for g in cotangents]
    return per_call[0] if len(per_call) == 1 else torch.cat(per_call, dim=2)


# --------------------------------------------------------------------------- the rules


def _add_dense_layer_kernel(
    K: Tensor, layer: ScaledLinear, A: Tensor, G: Tensor, *, weight: bool, bias: bool
) -> Tensor:
    """A [n, in], G [n, O, out]: K += (c²·(AAᵀ ⊗ 1_O1_Oᵀ) + β²) ⊙ (GGᵀ), the input Gram AAᵀ formed once for all
    O×O output pairs and GGᵀ by its blocks on and above the diagonal (symmetric_gram.py)."""
    n, O, _ = G.shape
    input_gram = G.new_zeros(n, n)
    if weight:
        input_gram.addmm_(A, A.T, alpha=layer.weight_multiplier**2)
    if bias:
        input_gram += layer.bias_multiplier**2
    return add_gram(K, G.reshape(n * O, -1), O, point_gram=input_gram)


def _add_shared_weight_kernel(K: Tensor, c2: float, A: Tensor, G: Tensor, budget: int, checkpoint: Checkpoint) -> None:
    """A [n, T, in], G [n, O, T, out]: K += c²·Σ_{t,u} (a_it·a_ju)(g_iat·g_jbu), [n·O, n·O]."""
    n, T, fan_in = A.shape
    O, out = G.shape[1], G.shape[3]
    if use_per_sample(*shared_weight_flops(n, O, T, fan_in, out), n * O * fan_in * A.element_size(), budget):
        chunk = max(1, budget // (n * O * fan_in * A.element_size()))
        for start in range(0, out, chunk):
            Gc = G[..., start : start + chunk].transpose(2, 3).reshape(n, -1, T)
            add_gram(K, torch.bmm(Gc, A).reshape(n * O, -1), O, alpha=c2)
            checkpoint()
        return
    K.add_(_position_sum(lambda rows: torch.einsum("itk,juk->ijtu", A[rows], A), G, budget, checkpoint), alpha=c2)


def _add_grouped_conv_kernel(
    K: Tensor, c2: float, U: Tensor, G: Tensor, groups: int, budget: int, checkpoint: Checkpoint
) -> None:
    """U [n, γ·in_g, T] (unfolded patches, channels first), G [n, O, γ·out_g, T]:
    K += c²·Σ_g Σ_{t,u} (a_igt·a_jgu)(g_iagt·g_jbgu), a grouped convolution's weight, each group a weight
    shared over the T positions that reads its own in_g = C/γ·kh·kw patch entries."""
    n, fan_in, T = U.shape
    O, out = G.shape[1], G.shape[2]
    in_g, out_g = fan_in // groups, out // groups
    itemsize = U.element_size()
    U, G = U.reshape(n, groups, in_g, T), G.reshape(n, O, groups, out_g, T)
    group_bytes = n * (O * out_g * in_g + in_g * T + O * out_g * T) * itemsize
    if use_per_sample(*shared_weight_flops(n, O, T, in_g, out_g), group_bytes, budget):
        # J[i, a, (g, o, k)] = Σ_t G[i, a, g, o, t] U[i, g, k, t]: one bmm over (point, group), in chunks of groups
        chunk = max(1, budget // group_bytes)
        for start in range(0, groups, chunk):
            gc = min(chunk, groups - start)
            Uc = U[:, start : start + gc].reshape(n * gc, in_g, T)
            Gc = G[:, :, start : start + gc].permute(0, 2, 1, 3, 4).reshape(n * gc, O * out_g, T)
            J = torch.bmm(Gc, Uc.transpose(1, 2)).reshape(n, gc, O, out_g * in_g).transpose(1, 2).reshape(n * O, -1)
            add_gram(K, J, O, alpha=c2)
            checkpoint()
        return
    for g in range(groups):
        A_g, G_g = U[:, g].transpose(1, 2), G[:, :, g].transpose(2, 3)
        gram = _position_sum(
            lambda rows, A_g=A_g: torch.einsum("itk,juk->ijtu", A_g[rows], A_g), G_g, budget, checkpoint
        )
        K.add_(gram, alpha=c2)


def _add_embedding_kernel(K: Tensor, c2: float, tokens: Tensor, G: Tensor, budget: int, checkpoint: Checkpoint) -> None:
    """tokens [n, T], G [n, O, T, w]: K += c²·Σ_{t,u} [tok_it = tok_ju](g_iat·g_jbu), [n·O, n·O]."""
    n, O, T, width = G.shape
    used, row = torch.unique(tokens, return_inverse=True)
    U = used.numel()
    if use_per_sample(*embedding_flops(n, O, T, U, width), n * O * U * G.element_size(), budget):
        chunk = max(1, budget // (n * O * U * G.element_size()))
        index = (torch.arange(n, device=G.device).unsqueeze(1) * U + row).reshape(-1)
        for start in range(0, width, chunk):
            Gc = G[..., start : start + chunk]
            per_position = Gc.permute(0, 2, 1, 3).reshape(n * T, -1)
            J = torch.zeros(n * U, per_position.shape[1], dtype=G.dtype, device=G.device).index_add_(
                0, index, per_position
            )
            J = J.reshape(n, U, O, -1).transpose(1, 2).reshape(n * O, -1)
            add_gram(K, J, O, alpha=c2)
            checkpoint()
        return
    same_token = lambda rows: (tokens[rows, None, :, None] == tokens[None, :, None, :]).to(G.dtype)  # noqa: E731
    K.add_(_position_sum(same_token, G, budget, checkpoint), alpha=c2)


def _position_sum(input_gram, G: Tensor, budget: int, checkpoint: Checkpoint = no_checkpoint) -> Tensor:
    """Σ_{t,u} input_gram[i,j,t,u]·(g_iat·g_jbu) in row chunks; input_gram(rows) -> [r, n, T, T]."""
    n, O, T, _ = G.shape
    row_bytes = n * O * O * T * T * G.element_size()
    chunk = max(1, budget // row_bytes)
    blocks = []
    for start in range(0, n, chunk):
        rows = slice(start, start + chunk)
        GG = torch.einsum("iatc,jbuc->iajbtu", G[rows], G)
        blocks.append(torch.einsum("ijtu,iajbtu->iajb", input_gram(rows), GG).reshape(-1, n * O))
        checkpoint()
    return torch.cat(blocks)
