// Which metric series each job chart shows, and whether its y axis is logarithmic (docs/diagnostics.md).

export const JOB_CHARTS = [
  { title: "loss", names: ["loss"], logY: true },
  { title: "ΔK(t) = ‖K(w_t) − K(w₀)‖_F / ‖K(w₀)‖_F", names: ["delta_k", "delta_k_logits"], logY: false, id: "delta_k" },
  { title: "‖w_t − w₀‖₂ and ‖w_t − w₀‖_∞", names: ["weight_change_l2", "weight_change_linf"], logY: true },
  { title: "linearization error", names: ["linearization_error", "linearization_error_logits"], logY: true },
  { title: "‖H‖ on the schedule", names: ["hessian_norm"], logY: true },
  { title: "kernel λ_min and λ_max", names: ["kernel_lambda_min", "kernel_lambda_max"], logY: true },
];

/** Series a compare view may overlay, with its axis. */
export const COMPARABLE = Object.fromEntries(JOB_CHARTS.flatMap((chart) => chart.names.map((name) => [name, chart.logY])));
