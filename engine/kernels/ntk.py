"""The tangent kernel K(w) on a probe set, by three methods that agree to rounding.

    K[(i,a),(j,b)] = ∇_w f_a(w; x_i) · ∇_w f_b(w; x_j),   row index i·O + a,   shape [n·O, n·O]

summed over the trainable parameters (no division by O). `of="outputs"` differentiates
φ(f) (the head included), `of="logits"` the pre-head f. K is a sum over parameter
tensors, K = Σ_w J_w J_wᵀ, so each tensor may be handled by a different rule.

structured  Any network. One forward and O backward passes (batched over the outputs: autograd.grad with
            is_grads_batched, as many outputs a pass as the budget allows) give each covered layer's inputs
            A and output cotangents G = ∂f_a/∂z (z = the layer output, multiplier included);
            a weight or bias of a ScaledLinear, ScaledConv2d or ScaledEmbedding is covered
            (layer_capture.py says exactly when), at T positions per point over all its calls:
            dense layer, x [n, in], z = c·x Wᵀ + β b:   K_l = (c²·A Aᵀ + β²) ⊗ 1_O1_Oᵀ ⊙ (G Gᵀ)
                (A Aᵀ once for all O×O output pairs; every Gram by its blocks on and above the
                diagonal, in place, K mirrored once at the end: symmetric_gram.py)
            weight shared over positions (tokens [n, T, in], conv patches, tied calls):
                K_l[i,j] = c² Σ_{t,s} (a_it·a_js)(g_it·g_js) + β² (Σ_t g_it)·(Σ_s g_js)
            embedding, z_it = c·E[tok_it]:  K_l[i,j] = c² Σ_{t,s} [tok_it = tok_js] (g_it·g_js)
            the last two from per-sample gradients J_i = c Σ_t g_it a_itᵀ (an embedding's scattered
            into the vocabulary rows used) or by the position sum, whichever takes fewer FLOPs
            (the position sum's memory-bound einsums weighted ×8), each in chunks within
            MEMORY_BUDGET_BYTES (kernel_rules.py has the FLOP counts).
            a parameter read directly by one call (layer_capture.py): a LayerNorm / RMSNorm affine γ, β
            (z = γ ⊙ x̂ + β), an additive table P (positions, h + P) or an expanded class token, from the
            cotangents g of that call's output z: J_i = Σ_broadcast g_i ⊙ d_i (d = x̂ for γ, else 1), K += J Jᵀ.
            Every other trainable parameter (a plain nn.Linear, a sliced table) is a fallback parameter: K += J_fb J_fbᵀ from per-sample gradients of f with
            respect to those parameters only, in chunks of points sized to the budget
            (per_sample.py). Never forms the n×p Jacobian of the covered parameters.
jacobian    vmap(jacrev) of a functional_call per point, then Σ_params J Jᵀ; memory n·O·p.
ntk_vp      K e = J (Jᵀ e): vjp then jvp (torch.func) for blocks of unit vectors e; any module,
            memory block·p.

auto        With the probe points, the cost model of kernel_cost.py: with F the forward FLOPs
            and s the bytes saved for backward per point, b bytes per number,
                structured  n·F·(1+O) + Σ_l rule FLOPs + [fallback] ((k+1)/2)·n·F·(1+2O) + 2(nO)²·p_fb
                            memory n·s + 2b·n·O·Σ_l T_l·out_l
                jacobian    n·F·(1+2O) + γ·2(nO)²·p,           memory b·n·O·p + n·(1+O)·s
                ntk_vp      n·F·(1+5nO),                        memory n·s + b·(3p + 8n·s/b)
            the fewest FLOPs among the methods whose (unchunkable) memory is within the budget;
            γ = (1 + 1/k)/2 for k Gram blocks a side (planner/kernel_cost_model.py). The profile
            is computed once per network and kept (kernel_cost.cached_profile).
            Without the points (resolve_method(net, "auto")): structured when every trainable
            parameter is covered, else jacobian.

Every method calls `checkpoint()` (ntklab.engine.callbacks.Checkpoint) between its units of work:
structured after each batched backward pass, each layer's rule, each chunk of a rule (kernel_rules.py) and each
chunk of per-sample gradients (per_sample.py);
jacobian after the Jacobian and each parameter tensor's J Jᵀ; ntk_vp after each block of columns, a
block holding at most CHECKPOINT_FLOPS of work.

Read off K, or beside it: `gradient_norms` (each output's gradient norm, from K's diagonal),
`outputs_kernel` (the outputs' K from the logits' K, through the head: no pass through the
net) and `kernel_trace_by_parameter` (tr K split by parameter tensor: which weights K is made of).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn
from torch.func import functional_call, jacrev, jvp, vjp, vmap
from torch.utils.flop_counter import FlopCounterMode

from ntklab.engine.callbacks import Checkpoint, no_checkpoint
from ntklab.engine.kernels import kernel_cost
from ntklab.engine.kernels.kernel_rules import add_direct_kernel, add_layer_kernel
from ntklab.engine.kernels.layer_capture import capture, fallback_names, rule_parameters
from ntklab.engine.kernels.per_sample import per_sample_kernel, saved_bytes_per_point
from ntklab.engine.kernels.symmetric_gram import add_gram, mirror
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.base import TangentNetwork, head_of
from ntklab.engine.nets.network import trainable_parameters

Method = Literal["structured", "jacobian", "ntk_vp"]
Of = Literal["outputs", "logits"]

MEMORY_BUDGET_BYTES = kernel_cost.MEMORY_BUDGET_BYTES

CHECKPOINT_FLOPS = 4e9
"""The most work ntk_vp puts between two checkpoints: about a second of one core (a cancel lands within it)."""


def tangent_kernel(
    net: nn.Module, x: Tensor, *, method: str = "auto", of: Of = "outputs", checkpoint: Checkpoint = no_checkpoint
) -> Tensor:
    """K(w) on the points x ([n, ...]), [(n·O), (n·O)], detached, in the net's dtype."""
    if of not in ("outputs", "logits"):
        raise ValueError(f"of must be 'outputs' or 'logits', got {of!r}")
    resolved = resolve_method(net, method, x, of=of)
    compute = {"structured": _structured_kernel, "jacobian": _jacobian_kernel, "ntk_vp": _ntk_vp_kernel}[resolved]
    return compute(net, x, of, checkpoint).detach()


def resolve_method(net: nn.Module, method: str, x: Tensor | None = None, *, of: Of = "outputs") -> Method:
    """`auto` by the cost model on the points x (kernel_cost.py); without x, structured when every
    trainable parameter has a structured rule, else jacobian. Every method works for any network."""
    if method not in ("auto", "structured", "jacobian", "ntk_vp"):
        raise ValueError(f"unknown kernel method {method!r}; expected auto, structured, jacobian or ntk_vp")
    if method != "auto":
        return method  # type: ignore[return-value]
    if x is None:
        return "structured" if not fallback_names(net, rule_parameters(net)) else "jacobian"
    return kernel_cost.cheapest(kernel_costs(net, x, of=of), MEMORY_BUDGET_BYTES)  # type: ignore[return-value]


def kernel_costs(net: nn.Module, x: Tensor, *, of: Of = "outputs") -> dict[str, kernel_cost.Cost]:
    """The cost model's estimate of each method on the points x (FLOPs, unchunkable and peak bytes)."""
    prof = kernel_cost.cached_profile(net, x, of, lambda logits: _head(net, logits, of))
    return kernel_cost.method_costs(prof, x.shape[0], MEMORY_BUDGET_BYTES)


def kernel_spectrum(K: Tensor) -> tuple[float, float, float]:
    """(λ_min, λ_max, λ_max/λ_min) of the symmetric K, in float64; the condition number is inf when λ_min ≤ 0."""
    K64 = K.detach().to(torch.float64)
    eigenvalues = torch.linalg.eigvalsh((K64 + K64.T) / 2)
    lam_min, lam_max = float(eigenvalues[0]), float(eigenvalues[-1])
    return lam_min, lam_max, lam_max / lam_min if lam_min > 0 else math.inf


def relative_change(K_t: Tensor, K_0: Tensor) -> float:
    """‖K_t − K_0‖_F / ‖K_0‖_F, in float64."""
    K0 = K_0.detach().to(torch.float64)
    return float(torch.linalg.norm(K_t.detach().to(torch.float64) - K0) / torch.linalg.norm(K0))


# --------------------------------------------------------------------------- read off K


def gradient_norms(K: Tensor) -> Tensor:
    """√diag(K) [n·O] for the kernel K [n·O, n·O]: entry i·O + a is ‖∇_w f_a(w; x_i)‖.

        ‖∇_w f_a(w; x_i)‖ = √K[(i,a),(i,a)]

    since K[(i,a),(j,b)] = ∇_w f_a(w; x_i) · ∇_w f_b(w; x_j) (row index i·O + a). The gradient
    is over all trainable parameters. Diagonal entries below zero (rounding, never the exact
    kernel) count as 0.
    """
    return K.diagonal().clamp(min=0).sqrt()


def head_jacobians(head: str, logits: Tensor) -> Tensor:
    """D [n, O, O] with D[i] = ∂φ(f)/∂f at the logits f = logits[i] ([n, O])."""

    def phi(f: Tensor) -> Tensor:
        return apply_head(head, f.unsqueeze(0)).squeeze(0)

    with torch.no_grad():
        return vmap(jacrev(phi))(logits.detach())


def outputs_kernel(K_logits: Tensor, logits: Tensor, head: str) -> Tensor:
    """K_φ = D K_f Dᵀ [n·O, n·O] from the logits' kernel K_f [n·O, n·O] and the logits [n, O] it was measured at.

    The outputs' tangent kernel by the chain rule through the head, no pass through the net. The
    head φ maps each point's logits f(x_i) ∈ R^O to its outputs, so with D_i = ∂φ/∂f at f(x_i) [O, O]

        ∇_w φ_a(x_i) = Σ_b D_i[a, b] ∇_w f_b(x_i)
        K_φ[(i,a),(j,c)] = Σ_{b,d} D_i[a, b] · K_f[(i,b),(j,d)] · D_j[c, d]    K_φ = D K_f Dᵀ,  D = blockdiag(D_1 … D_n)

    Element-wise heads (swish, tanh, sigmoid, identity) have D_i = diag φ'(f(x_i)); softmax has
    D_i = diag p_i − p_i p_iᵀ. The D_i come from torch.func (vmap of jacrev of the head on one
    point, head_jacobians); the product costs 2·n²·O³ multiply-adds.
    """
    n, O = logits.shape
    D = head_jacobians(head, logits).to(K_logits.dtype)
    K = K_logits.reshape(n, O, n, O)
    left = torch.einsum("iab,ibjd->iajd", D, K)
    return torch.einsum("iajd,jcd->iajc", left, D).reshape(n * O, n * O)


def kernel_trace_by_parameter(net: nn.Module, x: Tensor, params: dict[str, Tensor]) -> dict[str, float]:
    """{name: tr K_g} on the points x [n, ...], at the weights `params` (trainable tensors; the rest as in net).

    The trace of the tangent kernel (of the outputs φ(f)) split by parameter tensor: which weights
    the kernel is made of,

        tr K = Σ_{i,a} ‖∇_w φ(f)_a(w; x_i)‖² = Σ_g tr K_g,    tr K_g = Σ_{i,a} ‖∂φ(f)_a(w; x_i)/∂w_g‖²

    for the trainable parameter tensors w_g (names as in net.named_parameters(), e.g.
    "readout.bias"). One forward per point x_i (functional_call at the weights given, so any module
    works) and one torch.autograd.grad per output a give the rows ∂φ(f)_a(x_i)/∂w_g; only one
    point's graph and one p-vector are held at a time. Plain autograd rather than a vmapped
    torch.func jacrev: in a fresh worker process jacrev's first call costs ~1 s, against ~7 ms for
    this whole pass on a fig2-bottleneck net (16 points), and on large p both are one backward's
    work per row.
    """
    leaves = {name: p.detach().requires_grad_(True) for name, p in params.items()}
    traces = dict.fromkeys(leaves, 0.0)
    if not leaves:
        return traces
    head, names = head_of(net), list(leaves)
    with torch.enable_grad():
        for i in range(x.shape[0]):
            y = apply_head(head, functional_call(net, leaves, (x[i : i + 1],))).reshape(-1)  # [O]
            for a in range(y.numel()):
                rows = torch.autograd.grad(
                    y[a], [leaves[name] for name in names], retain_graph=a + 1 < y.numel(), allow_unused=True
                )
                for name, row in zip(names, rows):
                    if row is not None:
                        traces[name] += float(row.pow(2).sum(dtype=torch.float64))
    return traces


def _head(net: nn.Module, logits: Tensor, of: Of) -> Tensor:
    return apply_head(head_of(net), logits) if of == "outputs" else logits


# --------------------------------------------------------------------------- structured


def _structured_kernel(net: nn.Module, x: Tensor, of: Of, checkpoint: Checkpoint) -> Tensor:
    budget = MEMORY_BUDGET_BYTES
    outputs = lambda logits: _head(net, logits, of)  # noqa: E731
    captured = capture(net, x, outputs)
    y = captured.y
    n, O = y.shape
    targets = [z for record in captured.layers.values() for z in record.outputs] + [
        use.output for use in captured.direct
    ]
    cotangents: list[list[Tensor]] = [[] for _ in targets]
    chunk = _outputs_per_backward(targets, O, budget)
    for start in range(0, O if targets else 0, chunk):
        stop = min(O, start + chunk)
        units = torch.eye(O, dtype=y.dtype, device=y.device)[start:stop, None, :].expand(stop - start, n, O)
        grads = torch.autograd.grad(
            y,
            targets,
            grad_outputs=units,
            retain_graph=stop < O,
            is_grads_batched=True,
            allow_unused=True,
            materialize_grads=True,
        )
        for store, g, z in zip(cotangents, grads, targets):  # an unused z's zeros come without the outputs' axis
            store.append((g if g.dim() > z.dim() else g.expand(stop - start, *g.shape)).detach())
        checkpoint()
    K = torch.zeros(n * O, n * O, dtype=y.dtype, device=y.device)
    start = 0
    for layer, record in captured.layers.items():
        stop = start + len(record.outputs)
        if stop > start:
            G = [_per_point(store) for store in cotangents[start:stop]]
            add_layer_kernel(
                K, layer, record.inputs, G, weight=record.weight, bias=record.bias, budget=budget, checkpoint=checkpoint
            )
            checkpoint()
        start = stop
    for use, store in zip(captured.direct, cotangents[start:]):
        add_direct_kernel(K, _per_point(store), use.parts)
        checkpoint()
    mirror(K, O)
    fallback = captured.fallback
    del captured, y, cotangents, targets
    if fallback:
        K += per_sample_kernel(net, x, outputs, fallback, budget=budget, checkpoint=checkpoint)
    return K


def _outputs_per_backward(targets: list[Tensor], O: int, budget: int) -> int:
    """Outputs whose backward passes run as one batched pass (autograd.grad with is_grads_batched): as many as
    keep twice their cotangents of the recorded outputs z (the pass's transient gradients are of that order)
    within the budget; at least one, at most O."""
    per_output = 2 * sum(z.numel() * z.element_size() for z in targets)
    return max(1, min(O, budget // max(per_output, 1)))


def _per_point(store: list[Tensor]) -> Tensor:
    """The cotangents of one z by chunks of outputs, [o, n, …] each, as [n, O, …] (contiguous)."""
    whole = store[0] if len(store) == 1 else torch.cat(store)  # one batched backward: no concatenation's copy
    return whole.movedim(0, 1).contiguous()


# --------------------------------------------------------------------------- jacobian


def _jacobian_kernel(net: nn.Module, x: Tensor, of: Of, checkpoint: Checkpoint) -> Tensor:
    params = {name: p.detach() for name, p in trainable_parameters(net).items()}

    def f_point(p, x_i):
        return _head(net, functional_call(net, p, (x_i.unsqueeze(0),)), of).squeeze(0)

    with torch.no_grad():
        jacobians = vmap(jacrev(f_point), in_dims=(None, 0))(params, x)
    checkpoint()
    first = next(iter(jacobians.values()))
    n, O = first.shape[:2]
    K = torch.zeros(n * O, n * O, dtype=first.dtype, device=first.device)
    for J in jacobians.values():
        add_gram(K, J.reshape(n * O, -1), O)
        checkpoint()
    return mirror(K, O)


# --------------------------------------------------------------------------- ntk_vp


def _ntk_vp_kernel(net: nn.Module, x: Tensor, of: Of, checkpoint: Checkpoint) -> Tensor:
    params = {name: p.detach() for name, p in trainable_parameters(net).items()}

    def f(p):
        return _head(net, functional_call(net, p, (x,)), of)

    with torch.no_grad():
        y, pullback = vjp(f, params)
        n, O = y.shape

        def kernel_times(e: Tensor) -> Tensor:
            (tangent,) = pullback(e.reshape(n, O))
            return jvp(f, (params,), (tangent,))[1].reshape(-1)

        block = _ntk_vp_block(net, params, n * O, x)
        identity = torch.eye(n * O, dtype=y.dtype, device=y.device)
        columns = []
        for s in range(0, n * O, block):
            columns.append(vmap(kernel_times)(identity[s : s + block]))
            checkpoint()
    return torch.cat(columns).T


def _ntk_vp_block(net: nn.Module, params: dict[str, Tensor], rows: int, x: Tensor) -> int:
    """Columns per vmapped NTK-vector product within the memory budget (kernel_cost.ntk_vp_block) and
    within CHECKPOINT_FLOPS (a column costs about 5·n·F, F the forward FLOPs of one point); the
    activations are the input and hidden representations, or the bytes saved for backward."""
    p = sum(t.numel() for t in params.values())
    itemsize = next(iter(params.values())).element_size()
    with FlopCounterMode(display=False) as counter:
        if isinstance(net, TangentNetwork):
            with torch.no_grad():
                activations = x.numel() + x.shape[0] * sum(h.numel() for h in net.forward_with_hidden(x[:1])[1])
        else:
            outputs = lambda logits: logits  # noqa: E731
            activations = x.shape[0] * saved_bytes_per_point(net, x, outputs) // itemsize
    per_column = 5 * x.shape[0] * max(counter.get_total_flops(), 1)
    memory_block = kernel_cost.ntk_vp_block(p, activations, rows, itemsize, MEMORY_BUDGET_BYTES)
    return max(1, min(memory_block, int(CHECKPOINT_FLOPS // per_column)))
