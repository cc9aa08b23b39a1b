"""Which trainable parameters a structured rule covers, and one forward pass recording their layers' calls.

A parameter is covered when it is the `weight` or `bias` of a scaled layer (kernel_rules.has_rule),
is registered in no other module, and in the forward pass on the probe points x [n, …]

- enters the output only through that layer's own forward (a differentiable use of it
  anywhere else — `h @ embedding.weight.T` for a tied readout — is seen by a torch
  function mode and sends it to the fallback),
- and every call of the layer is batched over the n points: input and output [n, …], and a
  forward pass of the first point alone (n > 1; no grad) calls the layer as often with [1, …]
  and the same other dimensions. A layer applied to a reshaped [n·T, d] batch, to a tensor
  whose points lie on another axis ([T, n, d], which passes the first test when T = n) or
  to one that does not depend on the points at all (a [T, T] table with T = n), or modified in
  place afterwards, falls back; so does every layer if the one-point forward fails.

A layer called several times (weight tying) is covered: its calls are positions of one
shared weight.

A trainable parameter P outside the scaled layers is covered directly when the whole forward pass
uses it differentiably in exactly one torch call of these (its output z [n, …] batched as above,
checked by the one-point forward, and not modified in place afterwards):

- the affine scale γ or shift β of F.layer_norm / F.rms_norm (nn.LayerNorm, nn.RMSNorm, the graphs'
  LayerNorm): z = γ ⊙ x̂ + β, factor d = x̂ (the normalised input, recomputed) for γ, 1 for β;
- an additive table: h + P or h − P, P broadcast over the points (a positional table [T, C]);
- P.expand(n, …) (a class token [1, 1, C], concatenated afterwards);

then ∂f_a(x_i)/∂P = Σ over the axes P is broadcast along of g_ia ⊙ d_i, g = ∂f/∂z (a `DirectUse`;
kernel_rules.add_direct_kernel). Parameters kept in a ParameterDict / ParameterList (an ONNX network's
initializers) are not covered directly: the service's estimate counts every ONNX weight as a fallback.
Every other trainable parameter is a fallback parameter (per_sample.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from ntklab.engine.kernels import kernel_rules


@dataclass
class LayerCalls:
    """One covered layer: its calls' detached inputs and graph-attached outputs, and which of its parameters are covered."""

    weight: bool
    bias: bool
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)


@dataclass
class DirectUse:
    """One torch call reading parameters directly: its output z [n, …] (graph attached) and, per parameter, its name,
    the factor d [n, *z.shape[1:]] (None for 1) and the per-point shape its gradient Σ_broadcast g_ia ⊙ d_i sums to."""

    output: Tensor
    parts: list[tuple[str, Tensor | None, tuple[int, ...]]]


@dataclass
class Capture:
    """y = outputs(net(x)) [n, O] (graph attached); the covered layers' calls; the fallback parameters' names;
    the directly covered parameters' calls."""

    y: Tensor
    layers: dict[nn.Module, LayerCalls]
    fallback: list[str]
    direct: list[DirectUse] = field(default_factory=list)


def rule_parameters(net: nn.Module) -> dict[nn.Module, LayerCalls]:
    """The scaled layers with a covered trainable weight or bias, before any forward pass."""
    owners: dict[int, set[int]] = defaultdict(set)
    for module in net.modules():
        for p in module.parameters(recurse=False):
            owners[id(p)].add(id(module))

    def covered(p: Tensor | None) -> bool:
        return p is not None and p.requires_grad and len(owners[id(p)]) == 1

    layers = {}
    for module in net.modules():
        if kernel_rules.has_rule(module):
            weight, bias = covered(module.weight), covered(getattr(module, "bias", None))
            if weight or bias:
                layers[module] = LayerCalls(weight, bias)
    return layers


def fallback_names(net: nn.Module, layers: dict[nn.Module, LayerCalls], direct: list[DirectUse] = ()) -> list[str]:
    """Names (as in named_parameters) of the trainable parameters no rule covers, in registration order."""
    ids = {id(layer.weight) for layer, calls in layers.items() if calls.weight}
    ids |= {id(layer.bias) for layer, calls in layers.items() if calls.bias}
    names = {name for use in direct for name, _, _ in use.parts}
    return [name for name, p in net.named_parameters() if p.requires_grad and id(p) not in ids and name not in names]


def capture(net: nn.Module, x: Tensor, outputs: Callable[[Tensor], Tensor]) -> Capture:
    """One forward pass of x [n, …] with grad; outputs maps the logits to y (the head, or identity)."""
    layers = rule_parameters(net)
    owner = {id(layer.weight): layer for layer in layers}
    owner |= {id(layer.bias): layer for layer in layers if getattr(layer, "bias", None) is not None}
    guard = _ParameterUseGuard(owner, _direct_candidates(net, layers))
    n = x.shape[0]
    unbatched: set[nn.Module] = set()
    versions: list[tuple[nn.Module, Tensor, int]] = []

    def enter(module, args):
        guard.active.append(module)

    call_shapes: dict[nn.Module, list[tuple | None]] = defaultdict(list)

    def record(module, args, output):
        guard.active.pop()
        call_shapes[module].append(_call_shapes(args, output))
        if not (isinstance(output, Tensor) and output.dim() >= 2 and output.shape[0] == n and args[0].shape[0] == n):
            unbatched.add(module)
            return
        if output.requires_grad:
            layers[module].inputs.append(args[0].detach())
            layers[module].outputs.append(output)
            versions.append((module, output, output._version))

    handles = [layer.register_forward_pre_hook(enter) for layer in layers]
    handles += [layer.register_forward_hook(record) for layer in layers]
    try:
        with torch.enable_grad(), guard:
            y = outputs(net(x))
    finally:
        for handle in handles:
            handle.remove()
    unbatched |= {module for module, output, version in versions if output._version != version}
    to_check = {layer: call_shapes[layer] for layer in layers if layer not in unbatched}
    watched = {p_id for p_id in guard.candidates if p_id in guard.uses}
    alone = _one_point_pass(net, x[:1], to_check, watched) if n > 1 and (to_check or watched) else None
    if n > 1:
        unbatched |= _not_batched_alone(to_check, alone)
    for p_id in guard.stray:
        calls = layers[owner[p_id]]
        if p_id == id(owner[p_id].weight):
            calls.weight = False
        else:
            calls.bias = False
    for module in unbatched:
        layers[module].weight = layers[module].bias = False
    layers = {layer: calls for layer, calls in layers.items() if calls.weight or calls.bias}
    direct = _direct_uses(net, n, guard.uses, guard.candidates, alone)
    return Capture(y, layers, fallback_names(net, layers, direct), direct)


ADDITIVE = frozenset({torch.add, Tensor.add, Tensor.__add__, Tensor.__radd__, torch.sub, Tensor.sub, Tensor.__sub__})
NORMALISATIONS = {
    F.layer_norm: ("input", "normalized_shape", "weight", "bias", "eps"),
    F.rms_norm: ("input", "normalized_shape", "weight", "eps"),
}


def _direct_candidates(net: nn.Module, layers: dict[nn.Module, LayerCalls]) -> dict[int, str]:
    """id → name of the trainable parameters no scaled layer covers, except those kept in a ParameterDict or
    ParameterList (an ONNX network's initializers, read by its interpreter: the service's estimate,
    planner/forward_profile.py, counts every ONNX weight as a fallback parameter, and so does the worker)."""
    held = {id(p) for m in net.modules() if isinstance(m, (nn.ParameterDict, nn.ParameterList)) for p in m.parameters()}
    params = dict(net.named_parameters())
    return {id(params[name]): name for name in fallback_names(net, layers) if id(params[name]) not in held}


def _direct_uses(
    net: nn.Module, n: int, uses: dict[int, list[tuple]], candidates: dict[int, str], alone: OnePoint | None
) -> list[DirectUse]:
    """The candidates used once, by a call with a direct rule (module docstring), grouped by the call's output;
    for n > 1, only those whose use on the one point (`alone`, None if that pass failed) has the output [1, …]."""
    params = dict(net.named_parameters())
    found: dict[int, DirectUse] = {}
    for p_id, name in candidates.items():
        if len(uses[p_id]) != 1:
            continue
        func, args, kwargs, z, version = uses[p_id][0]
        part = _direct_part(params[name], func, args, kwargs, z, n)
        if part is None or z._version != version:
            continue
        found.setdefault(id(z), DirectUse(z, [])).parts.append((name, *part))
    if n > 1 and found:
        shapes = alone.uses if alone is not None else {}
        for key, use in list(found.items()):
            use.parts = [part for part in use.parts if shapes.get(id(params[part[0]])) == [(1, *use.output.shape[1:])]]
            if not use.parts:
                del found[key]
    return list(found.values())


def _direct_part(p: Tensor, func, args: tuple, kwargs: dict, z, n: int) -> tuple[Tensor | None, tuple[int, ...]] | None:
    """(factor d, per-point gradient shape) when the call z = func(*args, **kwargs) is a direct rule's use of p."""
    if not (isinstance(z, Tensor) and z.dim() >= 1 and z.shape[0] == n):
        return None
    if func in NORMALISATIONS:
        bound = dict(zip(NORMALISATIONS[func], args)) | kwargs
        h = bound["input"]
        if not (isinstance(h, Tensor) and h.shape == z.shape):
            return None
        if bound.get("weight") is p and bound.get("bias") is not p:
            others = dict(bound, input=h.detach(), weight=None) | ({"bias": None} if "bias" in bound else {})
            with torch.no_grad():
                return func(**others), tuple(p.shape)
        return (None, tuple(p.shape)) if bound.get("bias") is p and bound.get("weight") is not p else None
    if func in ADDITIVE and not kwargs and len(args) == 2 and sum(a is p for a in args) == 1:
        return None if not all(isinstance(a, Tensor) for a in args) else _broadcast_part(p, z)
    if func is Tensor.expand and args[0] is p:
        return _broadcast_part(p, z)
    return None


def _broadcast_part(p: Tensor, z: Tensor) -> tuple[None, tuple[int, ...]] | None:
    """(None, p's shape per point) when p broadcasts over the points' axis of z, else None."""
    per_point = z.dim() - 1
    leading = p.shape[: max(0, p.dim() - per_point)]
    if any(size != 1 for size in leading):
        return None
    return None, tuple(p.shape[len(leading) :])


@dataclass
class OnePoint:
    """A forward pass of one point x1 [1, …]: each checked layer's call shapes (as `_call_shapes`) and each watched
    parameter's differentiable uses' output shapes."""

    calls: dict[nn.Module, list[tuple | None]]
    uses: dict[int, list[tuple[int, ...]]]


def _one_point_pass(net: nn.Module, x1: Tensor, layers: Iterable[nn.Module], watched: set[int]) -> OnePoint | None:
    """The one pass both batching checks read (layers' calls, direct uses); None when the network cannot run one
    point, so nothing is proven batched."""
    calls: dict[nn.Module, list[tuple | None]] = defaultdict(list)

    def record(module, args, output):
        calls[module].append(_call_shapes(args, output))

    guard = _ParameterUseGuard({}, dict.fromkeys(watched, ""))
    handles = [layer.register_forward_hook(record) for layer in layers]
    try:
        with torch.enable_grad(), guard:
            net(x1)
    except Exception:  # noqa: BLE001  (a network that cannot run one point: nothing is proven batched)
        return None
    finally:
        for handle in handles:
            handle.remove()
    return OnePoint(calls, {p_id: [tuple(z.shape) for *_, z, _ in used] for p_id, used in guard.uses.items()})


def _call_shapes(args: tuple, output) -> tuple | None:
    """(input shape, output shape) of one call, None unless both are tensors with a first axis."""
    if not (args and isinstance(args[0], Tensor) and isinstance(output, Tensor) and args[0].dim() and output.dim()):
        return None
    return tuple(args[0].shape), tuple(output.shape)


def _not_batched_alone(batched: dict[nn.Module, list[tuple | None]], alone: OnePoint | None) -> set[nn.Module]:
    """The layers whose calls on the one point (`alone`) are not their calls on the n points with 1 in place of n
    (all of them when that pass failed)."""
    if alone is None:
        return set(batched)
    one = lambda shape: None if shape is None else ((1, *shape[0][1:]), (1, *shape[1][1:]))  # noqa: E731
    return {
        layer for layer, shapes in batched.items() if None in shapes or [one(s) for s in shapes] != alone.calls[layer]
    }


class _ParameterUseGuard(TorchFunctionMode):
    """Records covered parameters used differentiably outside the forward of the layer that owns them."""

    def __init__(self, owner: dict[int, nn.Module], candidates: dict[int, str] | None = None) -> None:
        super().__init__()
        self.owner = owner
        self.candidates = candidates or {}
        self.active: list[nn.Module] = []
        self.stray: set[int] = set()
        self.uses: dict[int, list[tuple]] = defaultdict(list)
        """Per candidate parameter, its differentiable calls: (func, args, kwargs, output, output's version)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if not any(isinstance(r, Tensor) and r.requires_grad for r in tree_leaves(result)):
            return result
        leaves = [id(t) for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)]
        used = [p_id for p_id in leaves if p_id in self.owner]
        if used:
            current = self.active[-1] if self.active else None
            self.stray.update(p_id for p_id in used if self.owner[p_id] is not current)
        for p_id in dict.fromkeys(p_id for p_id in leaves if p_id in self.candidates):
            self.uses[p_id].append((func, args, kwargs, result, getattr(result, "_version", 0)))
        return result
