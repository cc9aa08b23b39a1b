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
shared weight. Every other trainable parameter is a fallback parameter (per_sample.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from engine.kernels import kernel_rules


@dataclass
class LayerCalls:
    """One covered layer: its calls' detached inputs and graph-attached outputs, and which of its parameters are covered."""

    weight: bool
    bias: bool
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)


@dataclass
class Capture:
    """y = outputs(net(x)) [n, O] (graph attached); the covered layers' calls; the fallback parameters' names."""

    y: Tensor
    layers: dict[nn.Module, LayerCalls]
    fallback: list[str]


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


def fallback_names(net: nn.Module, layers: dict[nn.Module, LayerCalls]) -> list[str]:
    """Names (as in named_parameters) of the trainable parameters no rule covers, in registration order."""
    ids = {id(layer.weight) for layer, calls in layers.items() if calls.weight}
    ids |= {id(layer.bias) for layer, calls in layers.items() if calls.bias}
    return [name for name, p in net.named_parameters() if p.requires_grad and id(p) not in ids]


def capture(net: nn.Module, x: Tensor, outputs: Callable[[Tensor], Tensor]) -> Capture:
    """One forward pass of x [n, …] with grad; outputs maps the logits to y (the head, or identity)."""
    layers = rule_parameters(net)
    owner = {id(layer.weight): layer for layer in layers}
    owner |= {id(layer.bias): layer for layer in layers if getattr(layer, "bias", None) is not None}
    guard = _ParameterUseGuard(owner)
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
    if n > 1 and len(unbatched) < len(layers):
        unbatched |= _not_batched_alone(
            net, x[:1], {layer: call_shapes[layer] for layer in layers if layer not in unbatched}
        )
    for p_id in guard.stray:
        calls = layers[owner[p_id]]
        if p_id == id(owner[p_id].weight):
            calls.weight = False
        else:
            calls.bias = False
    for module in unbatched:
        layers[module].weight = layers[module].bias = False
    layers = {layer: calls for layer, calls in layers.items() if calls.weight or calls.bias}
    return Capture(y, layers, fallback_names(net, layers))


def _call_shapes(args: tuple, output) -> tuple | None:
    """(input shape, output shape) of one call, None unless both are tensors with a first axis."""
    if not (args and isinstance(args[0], Tensor) and isinstance(output, Tensor) and args[0].dim() and output.dim()):
        return None
    return tuple(args[0].shape), tuple(output.shape)


def _not_batched_alone(net: nn.Module, x1: Tensor, batched: dict[nn.Module, list[tuple | None]]) -> set[nn.Module]:
    """The layers whose calls on the one point x1 [1, …] are not their calls on the n points with 1 in place of n."""
    alone: dict[nn.Module, list[tuple | None]] = defaultdict(list)

    def record(module, args, output):
        alone[module].append(_call_shapes(args, output))

    handles = [layer.register_forward_hook(record) for layer in batched]
    try:
        with torch.no_grad():
            net(x1)
    except Exception:  # noqa: BLE001  (a network that cannot run one point: nothing is proven batched)
        return set(batched)
    finally:
        for handle in handles:
            handle.remove()
    one = lambda shape: None if shape is None else ((1, *shape[0][1:]), (1, *shape[1][1:]))  # noqa: E731
    return {layer for layer, shapes in batched.items() if None in shapes or [one(s) for s in shapes] != alone[layer]}


class _ParameterUseGuard(TorchFunctionMode):
    """Records covered parameters used differentiably outside the forward of the layer that owns them."""

    def __init__(self, owner: dict[int, nn.Module]) -> None:
        super().__init__()
        self.owner = owner
        self.active: list[nn.Module] = []
        self.stray: set[int] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        used = [id(t) for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor) and id(t) in self.owner]
        if used and any(isinstance(r, Tensor) and r.requires_grad for r in tree_leaves(result)):
            current = self.active[-1] if self.active else None
            self.stray.update(p_id for p_id in used if self.owner[p_id] is not current)
        return result
