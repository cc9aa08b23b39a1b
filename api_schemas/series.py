"""The metric series a job records, by name, and the charts that show them: the one list of series names.

    SERIES       name → definition (docs/diagnostics.md): every series the engine may record
                 (tests/engine/test_summary_fields.py runs it and checks each name it records is here)
    JOB_CHARTS   the dashboard's job charts: a title, the series drawn with their legend labels, log y or not;
                 service/ui/static/js/series_catalog.js is generated from it (service/ui/series_catalog.py)
    JOB_FIGURE   the series the SDK's and the CLI's job figure fetches (ntklab/plots.py draws them)

`_logits` series are of the logits f where the head φ is not the identity; the plain ones of the
outputs φ(f). K(w_t) is the empirical tangent kernel on the probe set at step t.
"""

from __future__ import annotations

from dataclasses import dataclass

SERIES: dict[str, str] = {
    "loss": "training loss L(w_t) over the training set",
    "delta_k": "‖K(w_t) − K(w₀)‖_F / ‖K(w₀)‖_F of the outputs' kernel",
    "delta_k_logits": "‖K(w_t) − K(w₀)‖_F / ‖K(w₀)‖_F of the logits' kernel",
    "kernel_lambda_min": "λ_min of the outputs' K(w_t)",
    "kernel_lambda_max": "λ_max of the outputs' K(w_t)",
    "weight_change_l2": "‖w_t − w₀‖₂ over the trainable parameters",
    "weight_change_linf": "‖w_t − w₀‖_∞ over the trainable parameters",
    "linearization_error": "‖f(w_t) − f_lin(w_t)‖_F / ‖f(w_t) − f(w₀)‖_F of the outputs, f_lin the Taylor model at w₀",
    "linearization_error_logits": "the linearization error of the logits",
    "hessian_norm": "max over probe (i, a) of ‖∇²_w f_a(w_t; x_i)‖₂ (diagnostics.hessian.at: schedule)",
    "loss_hessian_norm": "‖∇²L(w_t)‖₂",
    "gauss_newton_norm": "‖G(w_t)‖₂, the Gauss–Newton part of ∇²L",
    "loss_hessian_rest_norm": "‖∇²L(w_t) − G(w_t)‖₂",
    "loss_kernel_lambda_min": "λ_min of K(w_t) on the training set",
}


@dataclass(frozen=True)
class Chart:
    """One job chart: its title, {series name: legend label} in drawing order, and whether y is logarithmic."""

    title: str
    legends: dict[str, str]
    log_y: bool = True
    id: str | None = None


JOB_CHARTS: tuple[Chart, ...] = (
    Chart("training loss", {"loss": "loss"}),
    Chart(
        "ΔK(t) = ‖K(w_t) − K(w_0)‖_F / ‖K(w_0)‖_F",
        {"delta_k": "ΔK of the outputs φ(f)", "delta_k_logits": "ΔK of the logits f"},
        id="delta_k",
    ),
    Chart("weight change ‖w_t − w_0‖", {"weight_change_l2": "‖w_t − w_0‖_2", "weight_change_linf": "‖w_t − w_0‖_∞"}),
    Chart(
        "linearization error ‖f(w_t) − f_lin(w_t)‖ / ‖f(w_t) − f(w_0)‖",
        {"linearization_error": "of the outputs φ(f)", "linearization_error_logits": "of the logits f"},
    ),
    Chart("‖H‖ on the schedule", {"hessian_norm": "‖H‖"}),
    Chart("kernel spectrum of K(w_t)", {"kernel_lambda_min": "λ_min", "kernel_lambda_max": "λ_max"}),
)

JOB_FIGURE: tuple[str, ...] = ("delta_k", "delta_k_logits", "loss", "weight_change_l2", "weight_change_linf")
