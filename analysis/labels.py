"""What a figure calls a spec path, a summary scalar, a metric series or a fit's group: the paper's symbols.

    axis_label("model.hidden.0")          → "width m"
    axis_label("model.hidden.1", hidden)  → "bottleneck width m_b" when hidden layer 2 is narrower than both neighbours
    axis_label("delta_k_max")             → "ΔK"
    group_label({"model.output_activation": "identity"}) → "linear head";  {} → "all"

Anything not in the tables keeps its own name, so a user's path or scalar still labels its axis.
Used by the service (a fit's x_label, y_label and group_label in GET /v1/sweeps/{id}), the sweep
figure and the SDK's job figure, so the three say the same thing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

AXIS_LABELS: dict[str, str] = {
    "model.hidden.0": "width m",
    "data.n_train": "training points n",
    "data.input_dim": "input dimension d",
    "seed": "seed",
    "delta_k_max": "ΔK",
    "delta_k_final": "ΔK at the end",
    "delta_k_max_logits": "ΔK of the logits",
    "delta_k_final_logits": "ΔK of the logits at the end",
    "hessian_norm_init": "‖H‖ at init",
    "hessian_norm_final": "‖H‖ at the end",
    "hessian_grad_ratio_init": "‖H‖ / ‖∇f‖ at init",
    "hessian_kernel_ratio_init": "‖H‖ / ‖∇f‖² at init",
    "grad_norm_init": "‖∇f‖ at init",
    "weight_change_l2": "‖w* − w₀‖₂",
    "weight_change_linf": "‖w* − w₀‖∞",
    "kernel_lambda_min_init": "λ_min(K₀)",
    "kernel_lambda_min_final": "λ_min(K) at the end",
    "kernel_cond_init": "κ(K₀)",
    "kernel_cond_final": "κ(K) at the end",
    "linearization_error_final": "linearization error",
    "kernel_inf_distance_init": "‖K₀ − Θ∞‖_F / ‖Θ∞‖_F",
    "kernel_inf_distance_final": "‖K − Θ∞‖_F / ‖Θ∞‖_F at the end",
    "final_loss": "final loss",
    "steps": "steps",
    "wall_time_s": "wall time (s)",
}

SERIES_LABELS: dict[str, str] = {
    "delta_k": "ΔK(t) of the outputs φ(f)",
    "delta_k_logits": "ΔK(t) of the logits f",
    "loss": "training loss",
    "weight_change_l2": "‖w_t − w₀‖₂",
    "weight_change_linf": "‖w_t − w₀‖∞",
}

GROUP_VALUE_LABELS: dict[str, Any] = {
    "model.output_activation": lambda head: "linear head" if head == "identity" else f"{head} head",
    "name": str,
    "model.parameterization": str,
}

HIDDEN_WIDTH = re.compile(r"^model\.hidden\.(\d+)$")


def axis_label(path: str, hidden: Sequence[Any] | None = None) -> str:
    """The label of a spec path or summary scalar; `hidden` (the model's widths) marks a bottleneck layer."""
    if path in AXIS_LABELS:
        return AXIS_LABELS[path]
    layer = HIDDEN_WIDTH.match(path)
    if layer is None:
        return path
    index = int(layer.group(1))
    return "bottleneck width m_b" if is_bottleneck(hidden or [], index) else f"width of hidden layer {index + 1}"


def is_bottleneck(hidden: Sequence[Any], index: int) -> bool:
    """Hidden layer `index` has neighbours on both sides, and both are wider than it."""
    if not 0 < index < len(hidden) - 1 or not all(isinstance(width, int) for width in hidden):
        return False
    return hidden[index] < min(hidden[index - 1], hidden[index + 1])


def series_label(name: str) -> str:
    """The legend entry of a job's metric series (delta_k, loss, weight_change_l2, …)."""
    return SERIES_LABELS.get(name, name)


def group_label(group: Mapping[str, Any]) -> str:
    """A fit's group by its values ("linear head", "ntk", "seed = 0"), paths joined with ", "; "all" without group_by."""
    if not group:
        return "all"
    return ", ".join(_value_label(path, value) for path, value in group.items())


def _value_label(path: str, value: Any) -> str:
    if path in GROUP_VALUE_LABELS:
        return GROUP_VALUE_LABELS[path](value)
    return f"{path.split('.')[-1]} = {value}"
