"""Which models have an infinite-width kernel limit (Θ∞, Σ∞): the rule the API refuses a spec on.

    refusal(model) -> "model.… why" | None

The limit takes every hidden width to infinity with the weights of engine/nets/
parameterization.py. It exists (Jacot et al. 2018; Lee et al. 2019; Arora et al. 2019) when

  * the parameterization is ntk or standard — c·std = 1/√fan_in on every layer, so each unit
    sees a sum of many independent O(1/√fan_in) terms (a Gaussian process). Under meanfield the
    readout is c·std = 1/fan_in: the outputs at init tend to 0 (Σ∞ = 0), the tangent kernel to 0
    like 1/m, and with the learning rate scaled by m to train at all, the kernel moves by O(1)
    during training: there is no fixed kernel to compare with;
  * the model is built-in (mlp, cnn, resnet) or a graph of dense, conv2d, avg_pool,
    global_avg_pool, flatten, activation and residual layers. max_pool (no Gaussian expectation
    of a maximum in closed form), layer_norm and self_attention (their limits are not the
    Gaussian-process recursion) and embedding / patch_embed (token inputs) are refused;
  * every activation acts on units that are Gaussian in the limit — the output of a dense or
    conv2d layer, or of a pooling of one — or on the input itself (deterministic), since the
    layer maps are 2-D Gaussian expectations;
  * every residual's branch has a dense or conv2d layer at its top level, so the branch's units
    are independent of the skip's, and the residual does not read a flattened image or sequence.

An uploaded onnx model has no known architecture and is refused.
"""

from __future__ import annotations

from ntklab.api_schemas.graph import (
    ActivationLayer,
    AvgPool,
    Conv2d,
    Dense,
    Flatten,
    GlobalAvgPool,
    GraphLayer,
    Residual,
)

LINEAR_LAYERS = (AvgPool, GlobalAvgPool)
WHY_NOT = {
    "max_pool": "the maximum of Gaussian units has no closed-form kernel",
    "layer_norm": "normalisation is not a layer of the Gaussian-process recursion",
    "self_attention": "attention's limit is not the Gaussian-process recursion of dense layers",
    "embedding": "token inputs have no Gaussian-process recursion here",
    "patch_embed": "token inputs have no Gaussian-process recursion here",
}

# the units a layer sequence leaves: the input itself, Gaussian units, or neither
INPUT, GAUSSIAN, OTHER = "input", "gaussian", "other"


def refusal(model) -> str | None:
    """Why `model` (a ModelSpec) has no infinite-width limit, naming the field; None when it has one."""
    if model.kind == "onnx":
        return "model.kind 'onnx' has no infinite-width limit: an uploaded model's architecture is not known"
    if model.parameterization == "meanfield":
        return (
            "model.parameterization 'meanfield' has no infinite-width kernel: its 1/m readout sends the outputs "
            "and the tangent kernel at init to 0, and the kernel moves by O(1) in training (use ntk or standard)"
        )
    if model.kind == "graph":
        try:
            _walk(model.layers, INPUT, "model.layers")
        except _Refused as refused:
            return str(refused)
    return None


class _Refused(Exception):
    pass


def _walk(layers: list[GraphLayer], units: str, path: str) -> str:
    """The units after `layers` read `units`; raises _Refused naming the first layer without a limit."""
    flattened = False
    for index, layer in enumerate(layers):
        here = f"{path}.{index} ({layer.type})"
        if layer.type in WHY_NOT:
            raise _Refused(f"{here} has no infinite-width limit: {WHY_NOT[layer.type]}")
        if isinstance(layer, (Dense, Conv2d)):
            units, flattened = GAUSSIAN, False
        elif isinstance(layer, ActivationLayer):
            if units == OTHER:
                raise _Refused(
                    f"{here} acts on units that are not Gaussian in the limit (an activation's or a residual "
                    "sum's output): put a dense or conv2d layer before it"
                )
            units = INPUT if units == INPUT else OTHER
        elif isinstance(layer, Flatten):
            flattened = True
        elif isinstance(layer, Residual):
            units = _residual(layer, units, here, f"{path}.{index}.layers", flattened)
        elif not isinstance(layer, LINEAR_LAYERS):  # pragma: no cover - every layer type is named above
            raise _Refused(f"{here} has no infinite-width limit")
    return units


def _residual(layer: Residual, units: str, here: str, path: str, flattened: bool) -> str:
    if flattened:
        raise _Refused(f"{here} reads a flattened representation: put a dense layer before the residual")
    if not any(isinstance(inner, (Dense, Conv2d)) for inner in layer.layers):
        raise _Refused(
            f"{here} has no dense or conv2d layer in its branch: the branch's units are then not independent "
            "of the skip's, and the sum has no Gaussian limit"
        )
    branch = _walk(layer.layers, units, path)
    return GAUSSIAN if units == GAUSSIAN and branch == GAUSSIAN else OTHER
