// Generated from api_schemas/series.py by `python -m ntklab.service.ui.series_catalog`: do not edit.
export const SERIES = {
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
  "loss_kernel_lambda_min": "λ_min of K(w_t) on the training set"
};
export const JOB_CHARTS = [
  {
    "title": "training loss",
    "names": [
      "loss"
    ],
    "logY": true
  },
  {
    "title": "ΔK(t) = ‖K(w_t) − K(w_0)‖_F / ‖K(w_0)‖_F",
    "names": [
      "delta_k",
      "delta_k_logits"
    ],
    "logY": true,
    "id": "delta_k"
  },
  {
    "title": "weight change ‖w_t − w_0‖",
    "names": [
      "weight_change_l2",
      "weight_change_linf"
    ],
    "logY": true
  },
  {
    "title": "linearization error ‖f(w_t) − f_lin(w_t)‖ / ‖f(w_t) − f(w_0)‖",
    "names": [
      "linearization_error",
      "linearization_error_logits"
    ],
    "logY": true
  },
  {
    "title": "‖H‖ on the schedule",
    "names": [
      "hessian_norm"
    ],
    "logY": true
  },
  {
    "title": "kernel spectrum of K(w_t)",
    "names": [
      "kernel_lambda_min",
      "kernel_lambda_max"
    ],
    "logY": true
  }
];
export const SERIES_LABELS = {
  "loss": "loss",
  "delta_k": "ΔK of the outputs φ(f)",
  "delta_k_logits": "ΔK of the logits f",
  "weight_change_l2": "‖w_t − w_0‖_2",
  "weight_change_linf": "‖w_t − w_0‖_∞",
  "linearization_error": "of the outputs φ(f)",
  "linearization_error_logits": "of the logits f",
  "hessian_norm": "‖H‖",
  "kernel_lambda_min": "λ_min",
  "kernel_lambda_max": "λ_max"
};
