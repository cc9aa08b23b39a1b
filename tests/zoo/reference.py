"""Independent float64 references for a zoo member: its tangent kernel and model-Hessian norm from torch.func,
computed on the user's torch module itself (never on the converted ONNX network).

    K = module_kernel(module, x)                  # [n·O, n·O], row i·O + a, Σ over trainable parameters of J Jᵀ
    norm = module_hessian_norm(module, x)         # max over points i and outputs a of ‖∇²_w f_a(w; x_i)‖₂ (dense)

Both run the module under Float64Throughout: several Hugging Face modules compute parts in
float32 on purpose (RMSNorm and T5's LayerNorm upcast "to float32", rotary tables are built in
float32), while a float64 job runs every float cast as float64 (the converter's Cast rule);
the reference is the module with the same rule, so both sides are the same float64 function.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call, hessian, jacrev
from torch.overrides import TorchFunctionMode

FLOAT_CASTS = {torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16}


def _as_float64(value):
    return torch.float64 if isinstance(value, torch.dtype) and value.is_floating_point else value


class Float64Throughout(TorchFunctionMode):
    """Every floating dtype named in a torch call (tensor.to(torch.float32), dtype=torch.float32, .float()) is float64."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = {key: _as_float64(value) for key, value in (kwargs or {}).items()}
        if func in FLOAT_CASTS:
            return args[0].to(torch.float64)
        return func(*(_as_float64(arg) for arg in args), **kwargs)


def _trainable(module: nn.Module) -> dict[str, Tensor]:
    return {name: p.detach() for name, p in module.named_parameters() if p.requires_grad}


def module_kernel(module: nn.Module, x: Tensor) -> Tensor:
    """K[(i,a),(j,b)] = Σ_w ∂f_a(x_i)/∂w · ∂f_b(x_j)/∂w of the module in float64, [n·O, n·O]."""
    params = _trainable(module)
    with Float64Throughout():
        jacobians = jacrev(lambda p: functional_call(module, p, (x,)))(params)
    rows = None
    for J in jacobians.values():
        flat = J.reshape(J.shape[0] * J.shape[1], -1)
        rows = flat @ flat.T if rows is None else rows + flat @ flat.T
    return rows


def module_hessian_norm(module: nn.Module, x: Tensor) -> float:
    """max_{i,a} |λ|_max of the dense Hessian ∇²_w f_a(w; x_i) [p, p] over the module's trainable parameters."""
    params = _trainable(module)
    names, shapes = list(params), [t.shape for t in params.values()]
    sizes = [t.numel() for t in params.values()]
    flat = torch.cat([t.reshape(-1) for t in params.values()])

    def output(w: Tensor, point: Tensor, a: int) -> Tensor:
        unflat = {name: t.reshape(shape) for name, t, shape in zip(names, torch.split(w, sizes), shapes)}
        return functional_call(module, unflat, (point.unsqueeze(0),))[0, a]

    norms = []
    with Float64Throughout():
        for point in x:
            outputs = functional_call(module, params, (point.unsqueeze(0),)).shape[1]
            for a in range(outputs):
                H = hessian(output)(flat, point, a)
                norms.append(float(torch.linalg.eigvalsh((H + H.T) / 2).abs().max()))
    return max(norms)
