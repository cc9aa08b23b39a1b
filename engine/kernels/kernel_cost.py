"""The profile behind `auto`: one forward pass of the network measured with torch, for the cost model.

    profile(net, x, outputs) -> Profile      F, s, O, p, p_fb and the covered layers' shapes

The cost of each kernel method for n points, and the choice `auto` makes from it, are the
torch-free arithmetic of planner/kernel_cost_model.py (formulas there), which the service
also evaluates on a profile planned from the spec alone (planner/forward_profile.py) to
estimate a job before it runs. F counts matmuls and convolutions by torch's FlopCounterMode
plus one FLOP per activation saved for backward; s counts the distinct storages saved for
backward that are not parameters.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable

from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from ntklab.engine.kernels.layer_capture import DirectUse, capture
from ntklab.engine.kernels.per_sample import SavedBytes
from ntklab.engine.nets.base import head_of
from ntklab.engine.nets.layers import ScaledConv2d, ScaledEmbedding, ScaledLinear
from ntklab.planner.kernel_cost_model import (  # noqa: F401  (the cost model, used through this module by ntk.py)
    MEMORY_BUDGET_BYTES,
    METHODS,
    Cost,
    LayerShape,
    Profile,
    cheapest,
    method_costs,
    ntk_vp_block,
)

_PROFILES: weakref.WeakKeyDictionary[nn.Module, dict[tuple, Profile]] = weakref.WeakKeyDictionary()


def cached_profile(net: nn.Module, x: Tensor, of: str, outputs: Callable[[Tensor], Tensor]) -> Profile:
    """profile(), remembered per network for as long as it lives, keyed by what a profile depends on: the shape of
    one point, the dtype, `of`, the head, every module's type and every parameter (object, name, shape and
    requires_grad; not its values), so a swapped layer or a frozen parameter is profiled afresh.
    `auto` is called once per kernel; profiling each time (a one-point forward under FlopCounterMode and a
    parameter-use guard) costs as much as a small network's whole structured kernel."""
    key = (
        tuple(x.shape[1:]),
        x.dtype,
        x.device.type,
        of,
        head_of(net),
        tuple(type(m) for m in net.modules()),
        tuple((id(p), name, tuple(p.shape), p.requires_grad) for name, p in net.named_parameters()),
    )
    profiles = _PROFILES.setdefault(net, {})
    if key not in profiles:
        profiles[key] = profile(net, x, outputs)
    return profiles[key]


def profile(net: nn.Module, x: Tensor, outputs: Callable[[Tensor], Tensor]) -> Profile:
    """The profile of the net on the first point of x."""
    with FlopCounterMode(display=False) as counter, SavedBytes(net) as saved_bytes:
        captured = capture(net, x[:1], outputs)
    saved = saved_bytes.total
    params = dict(net.named_parameters())
    trainable = [p for p in params.values() if p.requires_grad]
    itemsize = trainable[0].element_size() if trainable else 4
    return Profile(
        O=captured.y.shape[1],
        p=sum(p.numel() for p in trainable),
        p_fallback=sum(params[name].numel() for name in captured.fallback),
        itemsize=itemsize,
        forward_flops=counter.get_total_flops() + saved / itemsize,
        saved_bytes=saved,
        activations=saved // itemsize,
        layers=tuple(
            _layer_shape(layer, calls.inputs, calls.outputs, calls.weight, calls.bias)
            for layer, calls in captured.layers.items()
        )
        + tuple(_direct_shape(use) for use in captured.direct),
    )


def _direct_shape(use: DirectUse) -> LayerShape:
    """A directly read parameter's call as a "norm" row: width = the parameters' per-point gradient size, T = the
    output's elements per point over it; weight when a part has a factor (a scale on x̂), bias when one has none."""
    width = max(math.prod(shape) for _, _, shape in use.parts)
    T = use.output[0].numel() // width
    has_factor = [factor is not None for _, factor, _ in use.parts]
    return LayerShape("norm", T, 1, width, any(has_factor), not all(has_factor))


def _layer_shape(layer, inputs, outputs, weight, bias) -> LayerShape:
    if isinstance(
        layer, ScaledConv2d
    ):  # and ScaledConv1d; a grouped one as one group's fan-in C/γ·kh·kw and all C' outputs:
        T = sum(z[0, 0].numel() for z in outputs)  # its per-sample FLOPs exactly, its position sum's within a factor ~2
        return LayerShape("shared", T, layer.fan_in, layer.out_channels, weight, bias)
    if isinstance(layer, ScaledEmbedding):
        return LayerShape("embedding", sum(t.numel() for t in inputs), layer.vocab, layer.width, weight, bias)
    assert isinstance(layer, ScaledLinear)
    if len(inputs) == 1 and inputs[0].dim() == 2:
        return LayerShape("dense", 1, layer.in_features, layer.out_features, weight, bias)
    T = sum(a.numel() // layer.in_features for a in inputs)
    return LayerShape("shared", T, layer.in_features, layer.out_features, weight, bias)
