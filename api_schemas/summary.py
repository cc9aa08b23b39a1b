"""A finished job's summary: every named scalar the engine reports, with its unit and definition.

The engine builds the summary through this model (engine/run.py), the API answers it
as `Job.summary`, and docs/diagnostics.md explains each number at length. A scalar is null where
its diagnostic was off or its value not finite; a scalar whose diagnostic the spec did not ask
for is absent. "init" is w₀, "final" the last point recorded; `_logits` variants are of the
logits f where the head φ is not the identity (the plain ones are of the outputs φ(f)).
Probe (i, a) is probe point i and output a; K = ∇f ∇fᵀ [n·O, n·O] is the empirical tangent kernel
on the probe set, H_ia = ∇²_w f_a(x_i) the model Hessian. Unit "1" is dimensionless; "loss" is the
training loss's own unit; "f" the unit of the model's outputs. Weights are pure numbers, so ∇_w f and
H_ia are in f and K in f².

Extra keys are kept (`extra="allow"`): a newer engine may report scalars this model does not name
yet, and a client built against it still reads them. Sent as reported: a scalar the engine did
not set is left out, not written as null.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

Outcome = Literal["converged", "max_steps", "time_budget", "diverged", "zero_kernel"]


def scalar(unit: str, definition: str) -> object:
    """A summary field: null by default, its unit and one-line definition as the description."""
    return Field(default=None, description=f"[{unit}] {definition}")


class JobSummary(BaseModel):
    """The named scalars of a finished job (docs/diagnostics.md); every one optional."""

    model_config = ConfigDict(extra="allow")

    # training
    final_loss: float | None = scalar("loss", "training loss at the last step; null if diverged")
    steps: int | None = scalar("steps", "optimizer updates applied")
    converged: bool | None = scalar("1", "training stopped because the loss reached training.target_loss")
    outcome: Outcome | None = scalar(
        "1", "why training stopped: converged, max_steps, time_budget, diverged, zero_kernel"
    )
    diverged_step: int | None = scalar("steps", "the step whose loss was not finite; null unless diverged")
    lr: float | None = scalar("1", "the step size used (training.lr, or the one lr=auto chose); null for a zero kernel")
    parameters: int | None = scalar("parameters", "trainable parameters p")
    device: str | None = scalar("1", "where it ran: cpu, cuda, cuda:0, …")
    threads: int | None = scalar("threads", "torch's intra-op threads")
    dtype: str | None = scalar("1", "floating-point type of the run: float32 or float64")
    kernel_method: str | None = scalar("1", "the tangent-kernel method used (the spec's, resolved)")
    # kernel movement
    delta_k_max: float | None = scalar("1", "max over recorded t of ‖K(w_t) − K(w₀)‖_F / ‖K(w₀)‖_F (the paper's ΔK)")
    delta_k_final: float | None = scalar("1", "‖K(w_t) − K(w₀)‖_F / ‖K(w₀)‖_F at the last recorded step")
    delta_k_max_logits: float | None = scalar("1", "delta_k_max of the logits' kernel (non-linear head only)")
    delta_k_final_logits: float | None = scalar("1", "delta_k_final of the logits' kernel (non-linear head only)")
    # kernel spectrum (outputs' K)
    kernel_lambda_min_init: float | None = scalar("f²", "λ_min(K(w₀)), the smallest eigenvalue of the outputs' kernel")
    kernel_lambda_max_init: float | None = scalar("f²", "λ_max(K(w₀)), the largest eigenvalue of the outputs' kernel")
    kernel_cond_init: float | None = scalar("1", "λ_max / λ_min of K(w₀); null when λ_min ≤ 0")
    kernel_lambda_min_final: float | None = scalar("f²", "λ_min of the outputs' kernel at the last weights")
    kernel_lambda_max_final: float | None = scalar("f²", "λ_max of the outputs' kernel at the last weights")
    kernel_cond_final: float | None = scalar("1", "λ_max / λ_min of the outputs' kernel at the last weights")
    grad_norm_init: float | None = scalar("f", "max over probe (i, a) of ‖∇_w f_a(x_i)‖ = √K[(i,a),(i,a)] at w₀")
    # model Hessian
    hessian_norm_init: float | None = scalar("f", "max over probe (i, a) of ‖H_ia‖₂ at w₀")
    hessian_norm_final: float | None = scalar("f", "max over probe (i, a) of ‖H_ia‖₂ at the last weights")
    hessian_norm_bound_init: float | None = scalar("f", "largest error bound of the ‖H_ia‖₂ runs at w₀")
    hessian_norm_bound_final: float | None = scalar("f", "largest error bound of the ‖H_ia‖₂ runs at the last weights")
    hessian_hvps_init: int | None = scalar("products", "Hessian-vector products spent at w₀, all runs")
    hessian_hvps_final: int | None = scalar("products", "Hessian-vector products spent at the last weights, all runs")
    hessian_grad_ratio_init: float | None = scalar("1", "max over probe (i, a) of ‖H_ia‖₂ / ‖∇_w f_a(x_i)‖ at w₀")
    hessian_kernel_ratio_init: float | None = scalar("1/f", "max over probe (i, a) of ‖H_ia‖₂ / K[(i,a),(i,a)] at w₀")
    # Hessian spectrum
    hessian_spectrum_trace_init: float | None = scalar("f or loss", "tr ∇²L, or the mean over (i, a) of tr H_ia, at w₀")
    hessian_spectrum_trace_final: float | None = scalar("f or loss", "the same trace at the last weights")
    hessian_spectrum_trace_se_init: float | None = scalar("f or loss", "standard error of hessian_spectrum_trace_init")
    hessian_spectrum_trace_se_final: float | None = scalar(
        "f or loss", "standard error of hessian_spectrum_trace_final"
    )
    # weights and linearization
    weight_change_l2: float | None = scalar("1", "‖w − w₀‖₂ over the trainable parameters at the last step")
    weight_change_linf: float | None = scalar("1", "‖w − w₀‖_∞ over the trainable parameters at the last step")
    linearization_error_final: float | None = scalar(
        "1", "‖f(w) − f_lin(w)‖_F / ‖f(w) − f(w₀)‖_F on the probe set at the last step, f_lin the Taylor model at w₀"
    )
    linearization_error_final_logits: float | None = scalar("1", "linearization_error_final of the logits")
    # infinite width
    kernel_inf_distance_init: float | None = scalar("1", "‖K(w₀) − Θ∞ ⊗ I_O‖_F / ‖Θ∞ ⊗ I_O‖_F, K the logits' kernel")
    kernel_inf_distance_final: float | None = scalar(
        "1", "the same distance at the last weights; null after divergence"
    )
    lambda_min_inf: float | None = scalar("f²", "λ_min(Θ∞), the infinite-width tangent kernel's smallest eigenvalue")
    kernel_inf_quadrature_error: float | None = scalar("1", "bound on the relative error of Θ∞'s Gaussian expectations")
    # time
    wall_time_s: float | None = scalar("s", "the whole run; under a worker including storing its outcome")
    timings: dict[str, float] | None = Field(
        default=None, description="[s] seconds spent per phase (data, build, kernel, hessian, training, storage, …)"
    )
    artifacts_skipped: str | None = scalar("1", "artifacts over max_artifact_bytes, not stored: name (size > cap); …")

    @model_serializer(mode="wrap")
    def _as_reported(self, handler):
        """Only the scalars that were set, and any extra ones: absent stays absent."""
        dumped = handler(self)
        sent = self.model_fields_set | set(self.model_extra or {})
        return {name: value for name, value in dumped.items() if name in sent}
