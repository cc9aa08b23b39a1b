// Which metric series each job chart shows, its caption and the series' legend labels (math labels, math.js), and
// whether its y axis is logarithmic (docs/diagnostics.md). A log axis leaves out non-positive values (ΔK(0) = 0).

export const JOB_CHARTS = [
  { title: "training loss", names: ["loss"], logY: true },
  { title: "ΔK(t) = ‖K(w_t) − K(w_0)‖_F / ‖K(w_0)‖_F", names: ["delta_k", "delta_k_logits"], logY: true, id: "delta_k" },
  { title: "weight change ‖w_t − w_0‖", names: ["weight_change_l2", "weight_change_linf"], logY: true },
  { title: "linearization error ‖f(w_t) − f_lin(w_t)‖ / ‖f(w_t) − f(w_0)‖", names: ["linearization_error", "linearization_error_logits"], logY: true },
  { title: "‖H‖ on the schedule", names: ["hessian_norm"], logY: true },
  { title: "kernel spectrum of K(w_t)", names: ["kernel_lambda_min", "kernel_lambda_max"], logY: true },
];

/** Legend labels of the series; a series not listed is labelled by its name. */
export const SERIES_LABELS = {
  loss: "loss",
  delta_k: "ΔK of the outputs φ(f)",
  delta_k_logits: "ΔK of the logits f",
  weight_change_l2: "‖w_t − w_0‖_2",
  weight_change_linf: "‖w_t − w_0‖_∞",
  linearization_error: "of the outputs φ(f)",
  linearization_error_logits: "of the logits f",
  hessian_norm: "‖H‖",
  kernel_lambda_min: "λ_min",
  kernel_lambda_max: "λ_max",
};

/** Series a compare view may overlay, with its axis. */
export const COMPARABLE = Object.fromEntries(JOB_CHARTS.flatMap((chart) => chart.names.map((name) => [name, chart.logY])));
