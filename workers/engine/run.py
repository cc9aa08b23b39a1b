"""One job: build the data and the network, train, and measure how far the model is from linear.

    run(spec, callbacks) -> Result

Phases (reported through callbacks.progress): "data", "init" (tangent kernel, Hessian
and layer sensitivity at w₀, the step size), "train" (once per step; the path
diagnostics on the schedule of workers.engine.schedule), "final" (Hessian, sensitivity
and artifacts at the last weights). Every recorded point goes to result.series and to
callbacks.metric as it is recorded. Each path diagnostic is one function
(PathState, step) -> {series name: value}; the modules that compute each number and
their definitions are listed in docs/diagnostics.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor

from api_schemas.spec import HessianDiagnostics, JobSpec, KernelDiagnostics
from workers.engine.artifacts import json_artifact, npy_artifact, weights_artifact
from workers.engine.callbacks import Callbacks, NullCallbacks, Progress
from workers.engine.data import load_data
from workers.engine.gradient import gradient_norms
from workers.engine.hessian import HessianReport, model_hessian
from workers.engine.hessian_ratio import hessian_grad_ratio
from workers.engine.linearization import linearization_errors
from workers.engine.nets import Network, build_network, trainable_parameters
from workers.engine.ntk import Method, kernel_spectrum, relative_change, resolve_method, tangent_kernel
from workers.engine.result import Artifact, Result, Scalar, Series
from workers.engine.schedule import diagnostic_steps, loss_steps
from workers.engine.sensitivity import layer_sensitivity
from workers.engine.training import TrainingOutcome, auto_lr, train
from workers.engine.weight_change import weight_change

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def run(spec: JobSpec, callbacks: Callbacks = NullCallbacks(), *, device: str | None = None) -> Result:
    """Train the spec's network and return its diagnostics; a diverged run still returns a Result."""
    started = time.perf_counter()
    device = resolve_device(device or spec.device)
    dtype, total = DTYPES[spec.dtype], spec.training.max_steps
    torch.manual_seed(spec.seed)
    callbacks.progress(Progress(0, total, "data"))
    data = load_data(spec, dtype=dtype, device=device)
    callbacks.progress(Progress(0, total, "init"))
    net = build_network(spec.model, data.input_shape, seed=spec.seed, dtype=dtype, device=device)
    path = start_path(spec, net, data.x_probe)
    at_init = endpoint(spec, path, "init")
    lr = spec.training.lr
    if lr == "auto":
        logits_kernel = path.kernels_init.get("logits", path.kernels_init["outputs"])
        lr = auto_lr(kernel_spectrum(logits_kernel)[1], len(data.x_probe), head=net.head, loss=spec.training.loss)

    result = Result()
    record = Recorder(result, callbacks)
    diagnostics = path_diagnostics(spec)
    diagnostic_schedule = diagnostic_steps(spec.diagnostics.kernel or KernelDiagnostics(), total)
    loss_schedule = loss_steps(total)

    def observe(step: int, loss: float, final: bool) -> None:
        if final or step in loss_schedule:
            record("loss", step, loss)
        if final or step in diagnostic_schedule:
            for diagnostic in diagnostics:
                for name, value in diagnostic(path, step).items():
                    record(name, step, value)

    outcome = train(net, data, spec.training, lr=lr, seed=spec.seed, callbacks=callbacks, observe=observe)
    callbacks.progress(Progress(outcome.steps, total, "final"))
    at_end = endpoint(spec, path, "final", finite=outcome.outcome != "diverged")
    summarise(result, spec, path, at_init, at_end, outcome, lr=lr, device=device, wall_time_s=time.perf_counter() - started)
    result.artifacts.update(artifacts(spec, path, at_init, at_end))
    return result


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class Recorder:
    """Appends a point to result.series[name] and streams it to callbacks.metric."""

    def __init__(self, result: Result, callbacks: Callbacks) -> None:
        self.result = result
        self.callbacks = callbacks

    def __call__(self, name: str, step: int, value: float | None) -> None:
        series = self.result.series.setdefault(name, Series())
        series.append(step, value)
        self.callbacks.metric(name, step, series.values[-1])


# --------------------------------------------------------------------------- path diagnostics


@dataclass
class PathState:
    """What the path diagnostics read: the probe set x [n, …], the weights w₀ and kernels K(w₀).

    heads: the kernels measured, of the outputs φ(f) and, with a non-linear head, of the
    logits f. kernels: K [n·O, n·O] of each at the last measured step. hessian_schedule:
    the Hessian's norm and eigenvalues at each step of the schedule (`hessian.at: schedule`).
    """

    net: Network
    x: Tensor
    method: Method
    heads: tuple[str, ...]
    w0: dict[str, Tensor]
    kernels_init: dict[str, Tensor]
    kernels: dict[str, Tensor]
    hessian: HessianDiagnostics | None
    hessian_schedule: list[dict] = field(default_factory=list)


PathDiagnostic = Callable[[PathState, int], dict[str, float | None]]


def start_path(spec: JobSpec, net: Network, x: Tensor) -> PathState:
    """The state at w₀: a copy of the trainable weights and the tangent kernels there."""
    method = resolve_method(net, (spec.diagnostics.kernel or KernelDiagnostics()).method, x)
    heads = ("outputs", "logits") if net.head != "identity" else ("outputs",)
    w0 = {name: p.detach().clone() for name, p in trainable_parameters(net).items()}
    kernels = {of: tangent_kernel(net, x, method=method, of=of) for of in heads}
    return PathState(net, x, method, heads, w0, kernels, dict(kernels), spec.diagnostics.hessian)


def path_diagnostics(spec: JobSpec) -> list[PathDiagnostic]:
    """The diagnostics the spec asks for at each scheduled step, in the order they are recorded."""
    wanted = spec.diagnostics
    chosen: list[tuple[bool, PathDiagnostic]] = [
        (wanted.kernel is not None, kernel_at),
        (wanted.weight_change, weight_change_at),
        (wanted.linearization_error, linearization_error_at),
        (hessian_at(spec, "schedule"), hessian_norm_at),
    ]
    return [diagnostic for on, diagnostic in chosen if on]


def kernel_at(path: PathState, step: int) -> dict[str, float | None]:
    """delta_k (and delta_k_logits) = ‖K(w_t) − K(w₀)‖_F / ‖K(w₀)‖_F; λ_min, λ_max of the outputs' K(w_t)."""
    points: dict[str, float | None] = {}
    for of in path.heads:
        if step == 0:
            path.kernels[of] = path.kernels_init[of]
        else:
            path.kernels[of] = tangent_kernel(path.net, path.x, method=path.method, of=of)
        points[f"delta_k{suffix(of)}"] = relative_change(path.kernels[of], path.kernels_init[of])
    lam_min, lam_max, _ = kernel_spectrum(path.kernels["outputs"])
    return points | {"kernel_lambda_min": lam_min, "kernel_lambda_max": lam_max}


def weight_change_at(path: PathState, step: int) -> dict[str, float | None]:
    """‖w_t − w₀‖₂ and ‖w_t − w₀‖_∞ over the trainable parameters."""
    l2, linf = weight_change(trainable_parameters(path.net), path.w0)
    return {"weight_change_l2": l2, "weight_change_linf": linf}


def linearization_error_at(path: PathState, step: int) -> dict[str, float | None]:
    """The Taylor model's relative error on the probe set, from step 1 (it is 0/0 at w₀)."""
    if step == 0:
        return {}
    errors = linearization_errors(path.net, path.x, path.w0, trainable_parameters(path.net))
    return {f"linearization_error{suffix(of)}": errors[of] for of in path.heads}


def hessian_norm_at(path: PathState, step: int) -> dict[str, float | None]:
    """max over the Hessian's probe points and outputs of ‖∇²_w f_a(w_t; x_i)‖₂."""
    report = hessian_report(path)
    path.hessian_schedule.append({"step": step, "norm": report.norm, "eigenvalues": report.eigenvalues})
    return {"hessian_norm": report.norm}


def suffix(of: str) -> str:
    return "" if of == "outputs" else "_logits"


def hessian_at(spec: JobSpec, when: str) -> bool:
    return spec.diagnostics.hessian is not None and when in spec.diagnostics.hessian.at


def hessian_report(path: PathState) -> HessianReport:
    h = path.hessian
    return model_hessian(path.net, path.x[: h.probe_points], of="outputs", top_k=h.top_k, iterations=h.iterations)


# --------------------------------------------------------------------------- at w₀ and at the end


@dataclass
class Endpoint:
    """Measured once at w₀ and once at the last weights; None where off, or not finite after divergence.

    outputs φ(f(w; x_probe)) [n, O]; kernels {of: K [n·O, n·O]} (at the end only when measured
    along the path); hessian at the first `probe_points` probe points; layer sensitivity as
    dicts of workers.engine.sensitivity.LayerSensitivity; weights as an .npz.
    """

    outputs: Tensor | None
    kernels: dict[str, Tensor] | None
    hessian: HessianReport | None
    sensitivity: list[dict] | None
    weights: Artifact | None


def endpoint(spec: JobSpec, path: PathState, when: str, *, finite: bool = True) -> Endpoint:
    """The Endpoint at the network's current weights; only the weights when they are not finite."""
    wanted = spec.diagnostics
    weights = weights_artifact(path.net) if wanted.save_weights else None
    if not finite:
        return Endpoint(None, None, None, None, weights)
    with torch.no_grad():
        outputs = path.net.outputs(path.x)
    measured_along_path = wanted.kernel is not None
    kernels = dict(path.kernels) if when == "init" or measured_along_path else None
    hessian = hessian_report(path) if hessian_at(spec, when) else None
    sensitivity = None
    if wanted.layer_sensitivity:
        sensitivity = [asdict(layer) for layer in layer_sensitivity(path.net, path.x, of="outputs")]
    return Endpoint(outputs, kernels, hessian, sensitivity, weights)


# --------------------------------------------------------------------------- summary and artifacts


def summarise(
    result: Result, spec: JobSpec, path: PathState, init: Endpoint, final: Endpoint, outcome: TrainingOutcome,
    *, lr: float | None, device: str, wall_time_s: float,
) -> None:
    """The named scalars of DESIGN §3 (None where a diagnostic is off or not finite); "final" = the last point recorded."""
    diverged = outcome.outcome == "diverged"
    s: dict[str, Scalar] = {
        "final_loss": outcome.final_loss,
        "steps": outcome.steps,
        "converged": outcome.outcome == "converged",
        "outcome": outcome.outcome,
        "diverged_step": outcome.diverged_step,
        "lr": lr,
        "parameters": sum(p.numel() for p in path.w0.values()),
        "device": device,
        "dtype": spec.dtype,
        "kernel_method": path.method,
    }
    for of in path.heads:
        series = result.series.get(f"delta_k{suffix(of)}")
        values = [v for v in series.values if v is not None] if series else []
        s[f"delta_k_max{suffix(of)}"] = max(values) if values else None
        s[f"delta_k_final{suffix(of)}"] = None if diverged else last(result, f"delta_k{suffix(of)}")
    lam_min, lam_max, cond = kernel_spectrum(init.kernels["outputs"])
    s |= {"kernel_lambda_min_init": lam_min, "kernel_lambda_max_init": lam_max, "kernel_cond_init": cond}
    final_spectrum = kernel_spectrum(final.kernels["outputs"]) if final.kernels else (None,) * 3
    s |= dict(zip(("kernel_lambda_min_final", "kernel_lambda_max_final", "kernel_cond_final"), final_spectrum))
    s["grad_norm_init"] = gradient_norms(init.kernels["outputs"]).max().item()
    s["hessian_norm_init"] = init.hessian.norm if init.hessian else None
    s["hessian_norm_final"] = final.hessian.norm if final.hessian else None
    for name, power in (("hessian_grad_ratio_init", 1), ("hessian_kernel_ratio_init", 2)):
        s[name] = hessian_grad_ratio(init.hessian.norms, init.hessian.grad_norms, power=power) if init.hessian else None
    for name in ("weight_change_l2", "weight_change_linf"):
        s[name] = None if diverged else last(result, name)
    for of in path.heads:
        s[f"linearization_error_final{suffix(of)}"] = None if diverged else last(result, f"linearization_error{suffix(of)}")
    s["wall_time_s"] = wall_time_s
    for name, value in s.items():
        result.set(name, value)


def last(result: Result, name: str) -> float | None:
    """The last recorded value of a series, None if it has none."""
    series = result.series.get(name)
    return series.values[-1] if series else None


def artifacts(spec: JobSpec, path: PathState, init: Endpoint, final: Endpoint) -> dict[str, Artifact]:
    """Outputs, kernels, weights, Hessian reports and layer sensitivity at w₀ and at the end (docs/diagnostics.md)."""
    endpoints = {"init": init, "final": final}
    out = {f"outputs_{when}.npy": npy_artifact(at.outputs) for when, at in endpoints.items() if at.outputs is not None}
    for when in spec.diagnostics.save_kernels:
        for of, K in (endpoints[when].kernels or {}).items():
            out[f"kernel{suffix(of)}_{when}.npy"] = npy_artifact(K)
    out |= {f"weights_{when}.npz": at.weights for when, at in endpoints.items() if at.weights is not None}
    hessian = {when: asdict(at.hessian) for when, at in endpoints.items() if at.hessian is not None}
    if hessian:
        out["hessian.json"] = json_artifact({**hessian, "schedule": path.hessian_schedule})
    sensitivity = {when: at.sensitivity for when, at in endpoints.items() if at.sensitivity is not None}
    if sensitivity:
        out["layer_sensitivity.json"] = json_artifact(sensitivity)
    return out
