"""One job: build the data and the network, train, and measure how far the model is from linear.

    run(spec, callbacks) -> Result

Phases, reported through callbacks.progress as they start (ntklab.engine.meter): "data",
"build", then at w₀ "kernel", "hessian" (done / planned Hessian-vector products, with an
ETA) and "sensitivity"; "train" once per step (the path diagnostics on the schedule of
ntklab.engine.training.schedule run inside it); at the last weights "hessian" and "sensitivity";
"storage" (the artifacts). summary.timings holds the seconds of each (training without the
diagnostics measured along the way) and summary.wall_time_s the whole run. Every recorded
point goes to result.series and to callbacks.metric as it is recorded. Each path diagnostic
is one function (PathState, step) -> {series name: value}, timed as its phase; they share
one forward pass per step (PathState.logits_at), and the outputs' kernel comes from the
logits' one by the chain rule (ntk.outputs_kernel), so a step costs one kernel pass. The
modules that compute each number and their definitions are listed in docs/diagnostics.md.

`warm_up(device)` runs WARM_UP_JOB, a tiny job through every phase, when a worker process starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor

from ntklab.api_schemas.spec import HessianDiagnostics, JobSpec, KernelDiagnostics
from ntklab.api_schemas.summary import JobSummary
from ntklab.engine.artifacts import json_artifact, npy_artifact, weights_artifact
from ntklab.engine.callbacks import Callbacks, NullCallbacks
from ntklab.engine.curvature.hessian import HessianReport, hessian_grad_ratio, model_hessian
from ntklab.engine.curvature.hessian_spectrum import HessianSpectrum, hessian_spectrum
from ntklab.engine.curvature.loss_hessian import loss_hessian_split
from ntklab.engine.diagnostics.linearization import linearization_errors, weight_change
from ntklab.engine.diagnostics.run_warnings import run_warnings
from ntklab.engine.diagnostics.sensitivity import layer_sensitivity
from ntklab.engine.kernels.ntk import (
    Method,
    gradient_norms,
    kernel_spectrum,
    outputs_kernel,
    relative_change,
    resolve_method,
    tangent_kernel,
)
from ntklab.engine.limits.infinite_width import infinite_width_report
from ntklab.engine.meter import Meter
from ntklab.engine.nets.activations import apply_head
from ntklab.engine.nets.base import TangentNetwork, head_of
from ntklab.engine.nets.network import build_network, trainable_parameters
from ntklab.engine.result import Artifact, Result, Scalar, Series
from ntklab.engine.training.data import load_data
from ntklab.engine.training.loop import TrainingOutcome, auto_lr, train
from ntklab.engine.training.schedule import diagnostic_steps, loss_steps
from ntklab.engine.uploads import NO_UPLOADS, Uploads

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def run(
    spec: JobSpec, callbacks: Callbacks = NullCallbacks(), *, device: str | None = None, uploads: Uploads = NO_UPLOADS
) -> Result:
    """Train the spec's network and return its diagnostics; a diverged run still returns a Result. The data set
    and ONNX model a spec names by id are read from `uploads` (the worker reads them from the database)."""
    meter = Meter(callbacks, spec.training.max_steps)
    device = resolve_device(device or spec.device)
    dtype, total = DTYPES[spec.dtype], spec.training.max_steps
    torch.manual_seed(spec.seed)
    with meter.phase("data"):
        data = load_data(spec, uploads=uploads, dtype=dtype, device=device)
    with meter.phase("build"):
        net = build_network(
            spec.model,
            data.input_shape,
            seed=spec.seed,
            dtype=dtype,
            device=device,
            checkpoint=meter.checkpoint,
            uploads=uploads,
        )
    path = start_path(spec, net, data.x_probe, meter)
    path.train = (data.x_train, data.y_train)
    at_init = endpoint(spec, path, "init")
    lr = spec.training.lr
    if lr == "auto":
        with meter.phase("kernel", report=False):
            logits_kernel = path.kernels_init.get("logits", path.kernels_init["outputs"])
            lr = auto_lr(kernel_spectrum(logits_kernel)[1], len(data.x_probe), head=net.head, loss=spec.training.loss)

    result = Result()
    record = Recorder(result, callbacks)
    diagnostics = path_diagnostics(spec)
    diagnostic_schedule = diagnostic_steps(spec.diagnostics.kernel or KernelDiagnostics(), total)
    loss_schedule = loss_steps(total)

    def observe(step: int, loss: float, final: bool) -> None:
        meter.step = step
        if final or step in loss_schedule:
            record("loss", step, loss)
        if final or step in diagnostic_schedule:
            for phase, diagnostic in diagnostics:
                with meter.phase(phase, report=False):
                    points = diagnostic(path, step)
                for name, value in points.items():
                    record(name, step, value)

    with meter.phase("training", report=False):
        outcome = train(net, data, spec.training, lr=lr, seed=spec.seed, callbacks=callbacks, observe=observe)
    meter.step = outcome.steps
    at_end = endpoint(spec, path, "final", finite=outcome.outcome != "diverged")
    summarise(result, spec, path, at_init, at_end, outcome, lr=lr, device=device)
    with meter.phase("storage"):
        result.artifacts.update(artifacts(spec, path, at_init, at_end))
    if spec.diagnostics.infinite_width is not None:
        with meter.phase("infinite_width"):
            limit, files = infinite_width_report(
                spec,
                net,
                path.x,
                at_init.kernels,
                at_end.kernels,
                finite=outcome.outcome != "diverged",
                method=path.method,
                checkpoint=meter.checkpoint,
            )
        for name, value in limit.items():
            result.set(name, value)
        result.artifacts.update(files)
    with meter.phase("warnings", report=False):
        result.warnings = run_warnings(
            spec, net, data, path.w0, {"init": at_init.hessian, "final": at_end.hessian}, result.summary
        )
    result.summary["timings"] = {phase: round(seconds, 4) for phase, seconds in meter.clock.seconds().items()}
    result.set("wall_time_s", meter.clock.elapsed())
    result.summary = JobSummary.model_validate(result.summary).model_dump()
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
    meter: the run's clock and progress. logits_step, logits: the step of the last forward
    pass on x and its logits f(w; x) [n, O] (see logits_at). train: the training set (x [n, …], y [n, O])
    the loss Hessian is taken over.
    """

    net: TangentNetwork
    x: Tensor
    method: Method
    heads: tuple[str, ...]
    w0: dict[str, Tensor]
    hessian: HessianDiagnostics | None
    meter: Meter
    kernels_init: dict[str, Tensor] = field(default_factory=dict)
    kernels: dict[str, Tensor] = field(default_factory=dict)
    hessian_schedule: list[dict] = field(default_factory=list)
    logits_step: int | None = None
    logits: Tensor | None = None
    train: tuple[Tensor, Tensor] | None = None

    def logits_at(self, step: int) -> Tensor:
        """f(w_step; x) [n, O], one forward pass per step shared by the kernel, the linearization error and the endpoint.

        The weights change only between training steps, so the step names the weights."""
        if self.logits_step != step:
            with torch.no_grad():
                self.logits = self.net(self.x)
            self.logits_step = step
        return self.logits


PathDiagnostic = Callable[[PathState, int], dict[str, float | None]]


def start_path(spec: JobSpec, net: TangentNetwork, x: Tensor, meter: Meter) -> PathState:
    """The state at w₀: a copy of the trainable weights and the tangent kernels there."""
    w0 = {name: p.detach().clone() for name, p in trainable_parameters(net).items()}
    heads = ("outputs", "logits") if head_of(net) != "identity" else ("outputs",)
    with meter.phase("kernel"):
        method = resolve_method(net, (spec.diagnostics.kernel or KernelDiagnostics()).method, x)
        path = PathState(net, x, method, heads, w0, spec.diagnostics.hessian, meter)
        path.kernels_init = path.kernels = measure_kernels(path, 0)
    return path


def measure_kernels(path: PathState, step: int) -> dict[str, Tensor]:
    """K(w_step) [n·O, n·O] of each head: one kernel pass, of the logits with a non-linear head, whose
    outputs' kernel then follows by the chain rule K_φ = D K_f Dᵀ (ntk.outputs_kernel)."""
    if path.heads == ("outputs",):
        return {
            "outputs": tangent_kernel(
                path.net, path.x, method=path.method, of="outputs", checkpoint=path.meter.checkpoint
            )
        }
    K_logits = tangent_kernel(path.net, path.x, method=path.method, of="logits", checkpoint=path.meter.checkpoint)
    return {"outputs": outputs_kernel(K_logits, path.logits_at(step), head_of(path.net)), "logits": K_logits}


def path_diagnostics(spec: JobSpec) -> list[tuple[str, PathDiagnostic]]:
    """(phase, diagnostic) for each diagnostic the spec asks for at each scheduled step, in the order recorded."""
    wanted = spec.diagnostics
    chosen: list[tuple[bool, str, PathDiagnostic]] = [
        (wanted.kernel is not None, "kernel", kernel_at),
        (wanted.weight_change, "training", weight_change_at),
        (wanted.linearization_error, "linearization", linearization_error_at),
        (hessian_at(spec, "schedule"), "hessian", hessian_norm_at),
        (wanted.loss_hessian is not None, "loss_hessian", loss_hessian_at(spec)),
    ]
    return [(phase, diagnostic) for on, phase, diagnostic in chosen if on]


def kernel_at(path: PathState, step: int) -> dict[str, float | None]:
    """delta_k (and delta_k_logits) = ‖K(w_t) − K(w₀)‖_F / ‖K(w₀)‖_F; λ_min, λ_max of the outputs' K(w_t)."""
    path.kernels = path.kernels_init if step == 0 else measure_kernels(path, step)
    points = {f"delta_k{suffix(of)}": relative_change(path.kernels[of], path.kernels_init[of]) for of in path.heads}
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
    errors = linearization_errors(
        path.net, path.x, path.w0, trainable_parameters(path.net), logits=path.logits_at(step)
    )
    return {f"linearization_error{suffix(of)}": errors[of] for of in path.heads}


def hessian_norm_at(path: PathState, step: int) -> dict[str, float | None]:
    """max over the Hessian's probe points and outputs of ‖∇²_w f_a(w_t; x_i)‖₂."""
    report = hessian_report(path)
    path.hessian_schedule.append({"step": step, "norm": report.norm, "eigenvalues": report.eigenvalues})
    return {"hessian_norm": report.norm}


def loss_hessian_at(spec: JobSpec) -> PathDiagnostic:
    """‖∇²L‖, its Gauss–Newton part, the rest and λ_min(K) over the training set at w_t (loss_hessian.py)."""
    wanted, method = spec.diagnostics.loss_hessian, (spec.diagnostics.kernel or KernelDiagnostics()).method

    def at(path: PathState, step: int) -> dict[str, float | None]:
        split = loss_hessian_split(
            path.net,
            *path.train,
            spec.training.loss,
            iterations=wanted.iterations,
            tolerance=wanted.tolerance,
            kernel_method=method,
            checkpoint=path.meter.checkpoint,
        )
        return {
            "loss_hessian_norm": split.norm,
            "gauss_newton_norm": split.gauss_newton_norm,
            "loss_hessian_rest_norm": split.rest_norm,
            "loss_kernel_lambda_min": split.kernel_lambda_min,
        }

    return at


def suffix(of: str) -> str:
    return "" if of == "outputs" else "_logits"


def hessian_at(spec: JobSpec, when: str) -> bool:
    return spec.diagnostics.hessian is not None and when in spec.diagnostics.hessian.at


def hessian_report(path: PathState) -> HessianReport:
    """The model Hessian at the current weights, reported as phase "hessian" in Hessian-vector products."""
    h = path.hessian
    with path.meter.counted("hessian") as progress:
        return model_hessian(
            path.net,
            path.x[: h.probe_points],
            of="outputs",
            top_k=h.top_k,
            outputs=h.outputs,
            iterations=h.iterations,
            tolerance=h.tolerance,
            progress=progress,
        )


# --------------------------------------------------------------------------- at w₀ and at the end


@dataclass
class Endpoint:
    """Measured once at w₀ and once at the last weights; None where off, or not finite after divergence.

    outputs φ(f(w; x_probe)) [n, O]; kernels {of: K [n·O, n·O]} (at the end only when measured
    along the path); hessian at the first `probe_points` probe points; layer sensitivity as
    dicts of ntklab.engine.diagnostics.sensitivity.LayerSensitivity; weights as an .npz; spectrum: the
    Hessian spectrum of `diagnostics.hessian_spectrum` (hessian_spectrum.py).
    """

    outputs: Tensor | None
    kernels: dict[str, Tensor] | None
    hessian: HessianReport | None
    sensitivity: list[dict] | None
    weights: Artifact | None
    spectrum: HessianSpectrum | None = None


def endpoint(spec: JobSpec, path: PathState, when: str, *, finite: bool = True) -> Endpoint:
    """The Endpoint at the network's current weights; only the weights when they are not finite."""
    wanted = spec.diagnostics
    with path.meter.phase("storage", report=False):
        weights = weights_artifact(path.net) if wanted.save_weights else None
    if not finite:
        return Endpoint(None, None, None, None, weights)
    outputs = apply_head(head_of(path.net), path.logits_at(path.meter.step))
    measured_along_path = wanted.kernel is not None
    kernels = dict(path.kernels) if when == "init" or measured_along_path else None
    hessian = hessian_report(path) if hessian_at(spec, when) else None
    sensitivity = None
    if wanted.layer_sensitivity:
        with path.meter.phase("sensitivity"):
            sensitivity = [asdict(layer) for layer in layer_sensitivity(path.net, path.x, of="outputs")]
    return Endpoint(outputs, kernels, hessian, sensitivity, weights, spectrum_report(spec, path, when))


def spectrum_report(spec: JobSpec, path: PathState, when: str) -> HessianSpectrum | None:
    """The Hessian spectrum at the current weights if the spec asks for it `when`, reported in HVPs."""
    wanted = spec.diagnostics.hessian_spectrum
    if wanted is None or when not in wanted.at:
        return None
    with path.meter.counted("hessian_spectrum") as progress:
        return hessian_spectrum(
            path.net,
            wanted,
            x_probe=path.x,
            x_train=path.train[0],
            y_train=path.train[1],
            loss=spec.training.loss,
            progress=progress,
        )


# --------------------------------------------------------------------------- summary and artifacts


def summarise(
    result: Result,
    spec: JobSpec,
    path: PathState,
    init: Endpoint,
    final: Endpoint,
    outcome: TrainingOutcome,
    *,
    lr: float | None,
    device: str,
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
        "threads": torch.get_num_threads(),
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
    for when, at in (("init", init), ("final", final)):
        s[f"hessian_norm_bound_{when}"] = at.hessian.norm_bound if at.hessian else None
        s[f"hessian_hvps_{when}"] = at.hessian.hvps if at.hessian else None
    for name, power in (("hessian_grad_ratio_init", 1), ("hessian_kernel_ratio_init", 2)):
        s[name] = hessian_grad_ratio(init.hessian.norms, init.hessian.grad_norms, power=power) if init.hessian else None
    for name in ("weight_change_l2", "weight_change_linf"):
        s[name] = None if diverged else last(result, name)
    for of in path.heads:
        s[f"linearization_error_final{suffix(of)}"] = (
            None if diverged else last(result, f"linearization_error{suffix(of)}")
        )
    if spec.diagnostics.hessian_spectrum is not None:
        for when, at in (("init", init), ("final", final)):
            s[f"hessian_spectrum_trace_{when}"] = at.spectrum.trace if at.spectrum else None
            s[f"hessian_spectrum_trace_se_{when}"] = at.spectrum.trace_se if at.spectrum else None
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
    spectra = {when: asdict(at.spectrum) for when, at in endpoints.items() if at.spectrum is not None}
    if spectra:
        out["hessian_spectrum.json"] = json_artifact(spectra)
    return out


WARM_UP_JOB = {
    "model": {"hidden": [4]},
    "data": {"kind": "gaussian_mixture", "n_train": 4, "input_dim": 2, "probe": {"n": 2}},
    "training": {"max_steps": 2},
}


def warm_up(device: str) -> float:
    """Run WARM_UP_JOB on `device` ("cpu", "cuda:0"); returns the seconds it took.

    One tiny job through every phase of the default spec, run when a worker process starts. The
    first job a process runs pays for what torch does once: functorch's transforms (jvp,
    functional_call) and the dispatch modes the kernel capture uses, LAPACK's first eigh, the
    autograd engine, the OpenMP thread pool; on a GPU the CUDA context, the cuBLAS and cuSOLVER
    handles and the first kernels' loading. `warm_up(device)` pays them before the worker takes a
    job, so its first job runs as fast as its second (docs/benchmarks.md, "The first job after
    start-up"). The job is a 4-unit MLP on 4 points, two training steps, with the default spec's
    diagnostics (kernel, Hessian, layer sensitivity, linearization, weight change, saved kernels
    and weights); nothing of it is kept.
    """
    started = time.perf_counter()
    run(JobSpec.model_validate(WARM_UP_JOB), device=device)
    return time.perf_counter() - started
