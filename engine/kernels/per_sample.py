"""The kernel of a subset of the parameters from per-sample gradients, in memory-budgeted chunks.

    K_S[(i,a),(j,b)] = Σ_{w ∈ S} ∂f_a(x_i)/∂w · ∂f_b(x_j)/∂w = J_S J_Sᵀ,   J_S [n·O, p_S]

J_S comes from torch.func: vmap over points of jacrev of a functional_call that replaces
only the parameters in S (the others are held fixed), so any module works. With b bytes
per number, budget B, and s the bytes a forward pass saves for backward per point:

    panel    q = clamp(⌊(B/2) / (O·p_S·b)⌋, 1, n) points whose J_S rows are kept
    chunk    m = clamp(⌊(B/2) / (O·p_S·b + (1+O)·s)⌋, 1, q) points per vmap(jacrev) call

For each panel of k = ⌈n/q⌉: its diagonal block J_P J_Pᵀ, then the blocks against every
later point, streamed in chunks of m (recomputed). Total per-sample gradients computed:
n·(k+1)/2 points (n when the whole J_S fits in B/2), each one forward and O backward passes;
`checkpoint()` is called after each chunk.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call, jacrev, vmap

from ntklab.engine.callbacks import Checkpoint, no_checkpoint
from ntklab.planner.kernel_cost_model import panel_and_chunk, passes  # noqa: F401  (the panel arithmetic, torch-free)


def per_sample_kernel(
    net: nn.Module,
    x: Tensor,
    outputs: Callable[[Tensor], Tensor],
    names: list[str],
    *,
    budget: int,
    checkpoint: Checkpoint = no_checkpoint,
) -> Tensor:
    """K_S [n·O, n·O] for the parameters `names` (as in net.named_parameters()); outputs maps logits to y."""
    params = dict(net.named_parameters())
    subset = {name: params[name].detach() for name in names}
    n = x.shape[0]
    with torch.no_grad():
        O = outputs(net(x[:1])).shape[1]
    dtype = next(iter(subset.values())).dtype
    K = torch.zeros(n * O, n * O, dtype=dtype, device=x.device)
    if not subset:
        return K
    p = sum(t.numel() for t in subset.values())
    itemsize = torch.finfo(dtype).bits // 8
    q, m = panel_and_chunk(n, O, p, itemsize, saved_bytes_per_point(net, x, outputs), budget)

    def f_point(sub: dict[str, Tensor], x_i: Tensor) -> Tensor:
        return outputs(functional_call(net, sub, (x_i.unsqueeze(0),))).squeeze(0)

    jacobian = vmap(jacrev(f_point), in_dims=(None, 0))

    @torch.no_grad()
    def rows(start: int, stop: int) -> list[Tensor]:
        """J_S of points start..stop-1: one [(stop−start)·O, numel] block per parameter."""
        blocks = [torch.empty((stop - start) * O, t.numel(), dtype=dtype, device=x.device) for t in subset.values()]
        for s in range(start, stop, m):
            e = min(stop, s + m)
            for block, part in zip(blocks, jacobian(subset, x[s:e]).values()):
                block[(s - start) * O : (e - start) * O] = part.reshape((e - s) * O, -1)
            checkpoint()
        return blocks

    for r0 in range(0, n, q):
        r1 = min(n, r0 + q)
        panel = rows(r0, r1)
        K[r0 * O : r1 * O, r0 * O : r1 * O] = sum(P @ P.T for P in panel)
        for c0 in range(r1, n, m):
            c1 = min(n, c0 + m)
            block = sum(P @ C.T for P, C in zip(panel, rows(c0, c1)))
            K[r0 * O : r1 * O, c0 * O : c1 * O] = block
            K[c0 * O : c1 * O, r0 * O : r1 * O] = block.T
    return K


def saved_bytes_per_point(net: nn.Module, x: Tensor, outputs: Callable[[Tensor], Tensor]) -> int:
    """Bytes the forward pass of one point saves for backward (parameters excluded)."""
    with torch.enable_grad(), SavedBytes(net) as saved:
        outputs(net(x[:1]))
    return saved.total


class SavedBytes(torch.autograd.graph.saved_tensors_hooks):
    """Within it, `total` counts the bytes of distinct storages saved for backward that are not parameters."""

    def __init__(self, net: nn.Module) -> None:
        parameter_storage = {p.untyped_storage().data_ptr() for p in net.parameters()}
        self.storages: dict[int, int] = {}

        def pack(t: Tensor) -> Tensor:
            storage = t.untyped_storage()
            if storage.data_ptr() not in parameter_storage:
                self.storages[storage.data_ptr()] = storage.nbytes()
            return t

        super().__init__(pack, lambda t: t)

    def __enter__(self) -> SavedBytes:
        super().__enter__()
        return self

    @property
    def total(self) -> int:
        return sum(self.storages.values())
