"""Model-Hessian-vector products for many (probe point, output, vector) triples per vmapped call.

A network is a function of its flat trainable parameters w [p] (registration order); for a
probe point x_r and a unit vector u_r = e_{a_r} [O] picking output a_r,

    g_r(w)     = ⟨u_r, y(w; x_r)⟩ = y_{a_r}(w; x_r)
    ∇g_r(w)    = ∇_w y_{a_r}(w; x_r)                                  [p]
    H_r v_r    = ∇²_w y_{a_r}(w; x_r) v_r = d/dε ∇g_r(w + ε v_r) at ε = 0   [p]

with y the outputs φ(f) (of="outputs"; φ = the module's `head`, identity for a module
without one) or the logits f (of="logits"), flattened to [O]. The product is reverse-over-
reverse, H_r v_r = (v_rᵀ H_r)ᵀ = torch.func.vjp of torch.func.grad (H_r is symmetric), vmapped
over the triples (x_r, u_r, v_r) with w shared, on w's device and dtype: on the CPU it takes
0.4–0.65 of the time of forward-over-reverse (jvp of grad), whose forward-mode rules run
through Python decompositions (measured per vmapped call, 2 threads: quickstart 0.9 vs 2.1 ms,
a conv resnet with 40 triples 5.0 vs 10.1 ms, an mlp of 10⁵ weights 1.1 vs 3.4 ms; equal at 4 M
weights). Calls are chunked to at most `max_batch` triples; by default
as many as fit a memory budget B (bytes):

    max_batch = max(1, ⌊B / (4·s + 6·p·b)⌋)

s = the bytes one point's forward saves for backward (per_sample.saved_bytes_per_point),
b = bytes per number: reverse-over-reverse holds the forward's saved tensors and the first
backward's graph (≈ 4 s at most) and about six p-vectors per triple (v, the gradient, the
vector-Jacobian product's cotangents, the parameter gradients, the result).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vjp, vmap

from ntklab.engine.kernels.per_sample import saved_bytes_per_point
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.base import head_of
from ntklab.engine.nets.network import trainable_parameters


class FlatModel:
    """w ↦ y(w; x) over the flat trainable parameters w [p] of a module; w = the current weights."""

    def __init__(self, net: nn.Module, of: str) -> None:
        params = trainable_parameters(net)
        self.net = net
        self.head = head_of(net) if of == "outputs" else "identity"
        self.names = list(params)
        self.shapes = [p.shape for p in params.values()]
        self.sizes = [p.numel() for p in params.values()]
        self.w = torch.cat([p.detach().reshape(-1) for p in params.values()])

    @property
    def dim(self) -> int:
        return self.w.numel()

    def outputs(self, w: Tensor, x_i: Tensor) -> Tensor:
        """y(w; x_i) [O] for one point x_i (no batch dimension)."""
        params = {name: t.reshape(shape) for name, t, shape in zip(self.names, torch.split(w, self.sizes), self.shapes)}
        logits = functional_call(self.net, params, (x_i.unsqueeze(0),))
        return apply_head(self.head, logits).reshape(-1)

    def output_dim(self, x_i: Tensor) -> int:
        with torch.no_grad():
            return self.outputs(self.w, x_i).numel()

    def picked(self, w: Tensor, x_i: Tensor, u: Tensor) -> Tensor:
        """g(w) = ⟨u, y(w; x_i)⟩, a scalar."""
        return self.outputs(w, x_i) @ u


class BatchedHVP:
    """H_r v_r and ∇g_r for batches of triples of one FlatModel, in chunks of `max_batch`."""

    def __init__(self, model: FlatModel, *, max_batch: int) -> None:
        self.model, self.max_batch = model, max_batch
        gradient = grad(model.picked)

        def product(x_i: Tensor, u: Tensor, v: Tensor) -> Tensor:
            return vjp(lambda w: gradient(w, x_i, u), model.w)[1](v)[0]

        self._products = vmap(product)
        self._gradients = vmap(gradient, in_dims=(None, 0, 0))

    def products(self, points: Tensor, units: Tensor, vectors: Tensor) -> Tensor:
        """H_r v_r [B, p] for points [B, ...], units [B, O] and vectors [B, p]."""
        vectors = vectors.to(self.model.w.dtype)
        return self._chunked(lambda s: self._products(points[s], units[s], vectors[s]), len(vectors))

    def gradients(self, points: Tensor, units: Tensor) -> Tensor:
        """∇_w g_r [B, p] for points [B, ...] and units [B, O]."""
        return self._chunked(lambda s: self._gradients(self.model.w, points[s], units[s]), len(units))

    def _chunked(self, call, total: int) -> Tensor:
        with torch.no_grad():
            return torch.cat([call(slice(s, s + self.max_batch)) for s in range(0, total, self.max_batch)])


def budget_batch(model: FlatModel, x: Tensor, budget: int) -> int:
    """max(1, ⌊B / (4·s + 6·p·b)⌋) triples per call (module docstring)."""
    saved = saved_bytes_per_point(model.net, x[:1], lambda logits: apply_head(model.head, logits))
    per_triple = 4 * saved + 6 * model.dim * model.w.element_size()
    return max(1, budget // per_triple)
