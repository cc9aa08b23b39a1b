"""The tangent kernel K(w) on a probe set, by three methods that agree to rounding.

    K[(i,a),(j,b)] = ∇_w f_a(w; x_i) · ∇_w f_b(w; x_j),   row index i·O + a,   shape [n·O, n·O]

summed over the trainable parameters (no division by O). `of="outputs"` differentiates
φ(f) (the head included), `of="logits"` the pre-head f.

structured  One forward and O backward passes give each trainable layer's input A and
            output cotangent G = ∂f_a/∂z (z = the layer output, multiplier included).
            Dense layer, z = c·x Wᵀ + β b:   K_l = c²·(A Aᵀ ⊗ 1_O1_Oᵀ) ⊙ (G Gᵀ) + β²·(G Gᵀ).
            Conv layer: with unfolded patches a_ip and cotangents g_ip at output position p,
            K_l[i,j] = c² Σ_{p,q} (a_ip·a_jq)(g_ip·g_jq) + β² (Σ_p g_ip)·(Σ_q g_jq); computed
            either from per-sample gradients J_i = c Σ_p g_ip a_ipᵀ (when n·O·C'·Ck fits in the
            memory budget and Ck < P², i.e. fewer FLOPs than the position sum) or by the
            position sum over row chunks sized to the budget. Never forms the n×p Jacobian.
jacobian    vmap(jacrev) of a functional_call per point, then Σ_params J Jᵀ; memory n·O·p.
ntk_vp      K e = J (Jᵀ e): vjp then jvp (torch.func) for blocks of unit vectors e; any module,
            memory block·p.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, jacrev, jvp, vjp, vmap

from workers.engine.activations import apply_head
from workers.engine.layers import SCALED_LAYERS, ScaledConv2d, ScaledLinear
from workers.engine.nets import trainable_parameters

Method = Literal["structured", "jacobian", "ntk_vp"]
Of = Literal["outputs", "logits"]

MEMORY_BUDGET_BYTES = 256 * 2**20


def tangent_kernel(net: nn.Module, x: Tensor, *, method: str = "auto", of: Of = "outputs") -> Tensor:
    """K(w) on the points x ([n, ...]), [(n·O), (n·O)], detached, in the net's dtype."""
    resolved = resolve_method(net, method)
    if of not in ("outputs", "logits"):
        raise ValueError(f"of must be 'outputs' or 'logits', got {of!r}")
    compute = {"structured": _structured_kernel, "jacobian": _jacobian_kernel, "ntk_vp": _ntk_vp_kernel}[resolved]
    return compute(net, x, of).detach()


def resolve_method(net: nn.Module, method: str) -> Method:
    """`auto` is structured when every module that owns a trainable parameter is a scaled layer."""
    if method == "auto":
        return "structured" if _supports_structured(net) else "jacobian"
    if method == "structured" and not _supports_structured(net):
        raise ValueError("kernel method 'structured' needs every trainable layer to be a ScaledLinear or ScaledConv2d")
    if method not in ("structured", "jacobian", "ntk_vp"):
        raise ValueError(f"unknown kernel method {method!r}; expected auto, structured, jacobian or ntk_vp")
    return method  # type: ignore[return-value]


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


def _supports_structured(net: nn.Module) -> bool:
    for module in net.modules():
        owns_trainable = any(p.requires_grad for p in module.parameters(recurse=False))
        if owns_trainable and not isinstance(module, SCALED_LAYERS):
            return False
    return True


def _head(net: nn.Module, logits: Tensor, of: Of) -> Tensor:
    return apply_head(net.head, logits) if of == "outputs" else logits


# --------------------------------------------------------------------------- structured


def _structured_kernel(net: nn.Module, x: Tensor, of: Of) -> Tensor:
    layers = [m for m in net.modules() if isinstance(m, SCALED_LAYERS) and _trainable(m)]
    inputs, outputs = _capture_layer_inputs_and_outputs(net, layers, x, of)
    y = outputs.pop("y")
    n, O = y.shape
    cotangents = [[] for _ in layers]
    for a in range(O):
        grads = torch.autograd.grad(y[:, a].sum(), [outputs[m] for m in layers], retain_graph=a < O - 1)
        for store, g in zip(cotangents, grads):
            store.append(g.detach())
    K = torch.zeros(n * O, n * O, dtype=y.dtype, device=y.device)
    for layer, store in zip(layers, cotangents):
        G = torch.stack(store, dim=1)
        if isinstance(layer, ScaledLinear):
            K += _dense_layer_kernel(layer, inputs[layer], G)
        else:
            K += _conv_layer_kernel(layer, inputs[layer], G)
    return K


def _trainable(layer: nn.Module) -> bool:
    return any(p.requires_grad for p in layer.parameters(recurse=False))


def _capture_layer_inputs_and_outputs(net, layers, x, of):
    """One forward pass; returns {layer: input A (detached)} and {layer: output z, "y": φ(f) or f}."""
    inputs, outputs = {}, {}

    def record(module, args, output):
        if module in outputs:
            raise ValueError("kernel method 'structured' needs each layer to be called once per forward pass")
        inputs[module], outputs[module] = args[0].detach(), output

    handles = [layer.register_forward_hook(record) for layer in layers]
    try:
        with torch.enable_grad():
            outputs["y"] = _head(net, net(x), of)
    finally:
        for handle in handles:
            handle.remove()
    return inputs, outputs


def _expand_over_outputs(gram: Tensor, O: int) -> Tensor:
    """[n, n] -> [n·O, n·O] with entry (i·O+a, j·O+b) = gram[i, j]."""
    return gram.repeat_interleave(O, dim=0).repeat_interleave(O, dim=1)


def _dense_layer_kernel(layer: ScaledLinear, A: Tensor, G: Tensor) -> Tensor:
    """A [n, in], G [n, O, out] -> c²·(AAᵀ ⊗ 1)⊙(GGᵀ) + β²·GGᵀ."""
    n, O, _ = G.shape
    Gf = G.reshape(n * O, -1)
    GG = Gf @ Gf.T
    K = torch.zeros_like(GG)
    if layer.weight.requires_grad:
        K += layer.weight_multiplier**2 * _expand_over_outputs(A @ A.T, O) * GG
    if layer.bias is not None and layer.bias.requires_grad:
        K += layer.bias_multiplier**2 * GG
    return K


def _conv_layer_kernel(layer: ScaledConv2d, X: Tensor, G: Tensor) -> Tensor:
    """X [n, C, H, W], G [n, O, C', H', W'] -> the layer's kernel, summed over output positions."""
    n, O, C_out = G.shape[:3]
    G = G.reshape(n, O, C_out, -1)
    K = torch.zeros(n * O, n * O, dtype=G.dtype, device=G.device)
    if layer.weight.requires_grad:
        A = F.unfold(X, layer.kernel_size, padding=layer.padding, stride=layer.stride)
        K += layer.weight_multiplier**2 * _conv_weight_kernel(A, G)
    if layer.bias is not None and layer.bias.requires_grad:
        Gs = G.sum(dim=3).reshape(n * O, C_out)
        K += layer.bias_multiplier**2 * (Gs @ Gs.T)
    return K


def _conv_weight_kernel(A: Tensor, G: Tensor) -> Tensor:
    """A [n, Ck, P], G [n, O, C', P] -> Σ_{p,q} (a_ip·a_jq)(g_iap·g_jbq), [n·O, n·O]."""
    n, Ck, P = A.shape
    O, C_out = G.shape[1:3]
    per_sample_bytes = n * O * C_out * Ck * A.element_size()
    if per_sample_bytes <= MEMORY_BUDGET_BYTES and Ck < P * P:
        J = torch.einsum("naop,nkp->naok", G, A).reshape(n * O, C_out * Ck)
        return J @ J.T
    row_bytes = n * O * O * P * P * A.element_size()
    chunk = max(1, MEMORY_BUDGET_BYTES // row_bytes)
    blocks = []
    for start in range(0, n, chunk):
        A_i, G_i = A[start : start + chunk], G[start : start + chunk]
        AA = torch.einsum("ikp,jkq->ijpq", A_i, A)
        GG = torch.einsum("iacp,jbcq->iajbpq", G_i, G)
        blocks.append(torch.einsum("ijpq,iajbpq->iajb", AA, GG).reshape(-1, n * O))
    return torch.cat(blocks)


# --------------------------------------------------------------------------- jacobian


def _jacobian_kernel(net: nn.Module, x: Tensor, of: Of) -> Tensor:
    params = {name: p.detach() for name, p in trainable_parameters(net).items()}

    def f_point(p, x_i):
        return _head(net, functional_call(net, p, (x_i.unsqueeze(0),)), of).squeeze(0)

    with torch.no_grad():
        jacobians = vmap(jacrev(f_point), in_dims=(None, 0))(params, x)
    n, O = next(iter(jacobians.values())).shape[:2]
    K = torch.zeros(n * O, n * O, dtype=x.dtype, device=x.device)
    for J in jacobians.values():
        Jf = J.reshape(n * O, -1)
        K += Jf @ Jf.T
    return K


# --------------------------------------------------------------------------- ntk_vp


def _ntk_vp_kernel(net: nn.Module, x: Tensor, of: Of) -> Tensor:
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
        columns = [vmap(kernel_times)(identity[s : s + block]) for s in range(0, n * O, block)]
    return torch.cat(columns).T


def _ntk_vp_block(net: nn.Module, params: dict[str, Tensor], rows: int, x: Tensor) -> int:
    """Columns per vmapped NTK-vector product within the memory budget.

    Each column holds a tangent and a cotangent of size p and, through the batched forward,
    vjp and jvp, about eight copies of the activations (input and hidden representations).
    """
    p = sum(t.numel() for t in params.values())
    activations = x.numel()
    if hasattr(net, "forward_with_hidden"):
        with torch.no_grad():
            activations += x.shape[0] * sum(h.numel() for h in net.forward_with_hidden(x[:1])[1])
    per_column = (3 * p + 8 * activations) * x.element_size()
    return max(1, min(rows, MEMORY_BUDGET_BYTES // per_column))
