"""One job: build the data and the network, train, and measure how far the model is from linear.

    run(spec, callbacks) -> Result

Phases (reported through callbacks.progress): "data", "init" (tangent kernel, Hessian
and layer sensitivity at w₀, the step size), "train" (once per step; diagnostics on the
schedule of workers.engine.schedule), "final" (Hessian, sensitivity and artifacts at the
last weights). Every recorded point goes to result.series and to callbacks.metric as it
is recorded. Definitions of every number are in docs/diagnostics.md.
"""

from __future__ import annotations

import time
from dataclasses import asdict

import torch
from torch import Tensor

from api_schemas.spec import JobSpec, KernelDiagnostics
from workers.engine.artifacts import json_artifact, npy_artifact, weights_artifact
from workers.engine.callbacks import Callbacks, NullCallbacks, Progress
from workers.engine.data import Dataset, load_data
from workers.engine.hessian import HessianReport, model_hessian
from workers.engine.linearization import Linearization
from workers.engine.nets import Network, build_network, trainable_parameters
from workers.engine.ntk import kernel_spectrum, relative_change, resolve_method, tangent_kernel
from workers.engine.result import Result, Scalar, Series
from workers.engine.schedule import diagnostic_steps, loss_steps
from workers.engine.sensitivity import layer_sensitivity
from workers.engine.training import TrainingOutcome, auto_lr, train

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def run(spec: JobSpec, callbacks: Callbacks = NullCallbacks(), *, device: str | None = None) -> Result:
    """Train the spec's network and return its diagnostics; a diverged run still returns a Result."""
    started = time.perf_counter()
    device = resolve_device(device or spec.device)
    total = spec.training.max_steps
    torch.manual_seed(spec.seed)
    callbacks.progress(Progress(0, total, "data"))
    data = load_data(spec, dtype=DTYPES[spec.dtype], device=device)
    callbacks.progress(Progress(0, total, "init"))
    net = build_network(spec.model, data.input_shape, seed=spec.seed, dtype=DTYPES[spec.dtype], device=device)
    result = Result()
    path = PathDiagnostics(spec, net, data, Recorder(result, callbacks))
    lr = spec.training.lr
    if lr == "auto":
        lr = auto_lr(path.logits_lambda_max_init(), len(data.x_probe), head=net.head, loss=spec.training.loss)
    outcome = train(net, data, spec.training, lr=lr, seed=spec.seed, callbacks=callbacks, observe=path.observe)
    callbacks.progress(Progress(outcome.steps, total, "final"))
    path.finish(outcome)
    summarise(result, spec, net, path, outcome, lr=lr, device=device, wall_time_s=time.perf_counter() - started)
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


class PathDiagnostics:
    """Measures at w₀, at the scheduled steps of training and at the final weights.

    Kernels are of the outputs φ(f) on the probe set and, with a non-linear head, of the
    logits f as well. The Hessian, layer sensitivity, weights and kernels at init and
    final become artifacts.
    """

    def __init__(self, spec: JobSpec, net: Network, data: Dataset, record: Recorder) -> None:
        self.spec, self.net, self.x = spec, net, data.x_probe
        self.record = record
        kernel = spec.diagnostics.kernel or KernelDiagnostics()
        self.method = resolve_method(net, kernel.method)
        self.kernel_along_path = spec.diagnostics.kernel is not None
        self.heads = ("outputs", "logits") if net.head != "identity" else ("outputs",)
        self.steps = diagnostic_steps(kernel, spec.training.max_steps)
        self.loss_steps = loss_steps(spec.training.max_steps)
        self.w0 = {name: p.detach().clone() for name, p in trainable_parameters(net).items()}
        self.linearization = Linearization(net, self.x) if spec.diagnostics.linearization_error else None
        self.kernels_init = {of: self.kernel(of) for of in self.heads}
        self.kernels_now = dict(self.kernels_init)
        self.spectrum_init = kernel_spectrum(self.kernels_init["outputs"])
        self.weights_init = weights_artifact(net) if spec.diagnostics.save_weights else None
        self.outputs_init = self.outputs()
        self.hessian = {"init": self.hessian_report()} if self.hessian_at("init") else {}
        self.hessian_path: list[dict] = []
        self.sensitivity = {"init": self.sensitivity_report()} if spec.diagnostics.layer_sensitivity else {}
        self.weight_change_now: tuple[float, float] | None = None
        self.linearization_now: dict[str, float | None] = {}
        self.outcome: TrainingOutcome | None = None

    def logits_lambda_max_init(self) -> float:
        """λ_max of the logits' kernel at w₀ (the outputs' kernel with an identity head)."""
        if "logits" in self.kernels_init:
            return kernel_spectrum(self.kernels_init["logits"])[1]
        return self.spectrum_init[1]

    def kernel(self, of: str) -> Tensor:
        return tangent_kernel(self.net, self.x, method=self.method, of=of)

    def outputs(self) -> Tensor:
        with torch.no_grad():
            return self.net.outputs(self.x)

    def hessian_at(self, when: str) -> bool:
        return self.spec.diagnostics.hessian is not None and when in self.spec.diagnostics.hessian.at

    def hessian_report(self) -> HessianReport:
        h = self.spec.diagnostics.hessian
        return model_hessian(self.net, self.x[: h.probe_points], of="outputs", top_k=h.top_k, iterations=h.iterations)

    def sensitivity_report(self) -> list[dict]:
        return [asdict(layer) for layer in layer_sensitivity(self.net, self.x, of="outputs")]

    def observe(self, step: int, loss: float, final: bool) -> None:
        """Training's per-step hook: the loss and, on the schedule, the path diagnostics at w_step."""
        if final or step in self.loss_steps:
            self.record("loss", step, loss)
        if final or step in self.steps:
            self.measure(step)

    def measure(self, step: int) -> None:
        if self.kernel_along_path:
            for of in self.heads:
                self.kernels_now[of] = self.kernels_init[of] if step == 0 else self.kernel(of)
                suffix = "" if of == "outputs" else "_logits"
                self.record(f"delta_k{suffix}", step, relative_change(self.kernels_now[of], self.kernels_init[of]))
            lam_min, lam_max, _ = kernel_spectrum(self.kernels_now["outputs"])
            self.record("kernel_lambda_min", step, lam_min)
            self.record("kernel_lambda_max", step, lam_max)
        if self.spec.diagnostics.weight_change:
            self.weight_change_now = self.weight_change()
            self.record("weight_change_l2", step, self.weight_change_now[0])
            self.record("weight_change_linf", step, self.weight_change_now[1])
        if self.linearization is not None and step > 0:
            self.linearization_now = self.linearization.errors()
            for of in self.heads:
                suffix = "" if of == "outputs" else "_logits"
                self.record(f"linearization_error{suffix}", step, self.linearization_now[of])
        if self.hessian_at("schedule"):
            report = self.hessian_report()
            self.hessian_path.append({"step": step, "norm": report.norm, "eigenvalues": report.eigenvalues})
            self.record("hessian_norm", step, report.norm)

    def weight_change(self) -> tuple[float, float]:
        """(‖w − w₀‖₂, ‖w − w₀‖_∞) over all trainable parameters."""
        deltas = [(p.detach() - self.w0[name]).flatten() for name, p in trainable_parameters(self.net).items()]
        delta = torch.cat(deltas)
        return torch.linalg.vector_norm(delta).item(), torch.linalg.vector_norm(delta, ord=float("inf")).item()

    def finish(self, outcome: TrainingOutcome) -> None:
        """Diagnostics at the final weights; skipped when training diverged (they are not finite)."""
        self.outcome = outcome
        if outcome.outcome == "diverged":
            return
        if self.hessian_at("final"):
            self.hessian["final"] = self.hessian_report()
        if self.spec.diagnostics.layer_sensitivity:
            self.sensitivity["final"] = self.sensitivity_report()

    def artifacts(self) -> dict:
        diverged = self.outcome is not None and self.outcome.outcome == "diverged"
        out = {"outputs_init.npy": npy_artifact(self.outputs_init)}
        if not diverged:
            out["outputs_final.npy"] = npy_artifact(self.outputs())
        for when in self.spec.diagnostics.save_kernels:
            if when == "final" and (diverged or not self.kernel_along_path):
                continue
            kernels = self.kernels_init if when == "init" else self.kernels_now
            for of, K in kernels.items():
                stem = "kernel" if of == "outputs" else "kernel_logits"
                out[f"{stem}_{when}.npy"] = npy_artifact(K)
        if self.weights_init is not None:
            out["weights_init.npz"] = self.weights_init
            out["weights_final.npz"] = weights_artifact(self.net)
        if self.hessian:
            payload = {when: asdict(report) for when, report in self.hessian.items()}
            out["hessian.json"] = json_artifact({**payload, "schedule": self.hessian_path})
        if self.sensitivity:
            out["layer_sensitivity.json"] = json_artifact(self.sensitivity)
        return out


def summarise(
    result: Result, spec: JobSpec, net: Network, path: PathDiagnostics, outcome: TrainingOutcome,
    *, lr: float, device: str, wall_time_s: float,
) -> None:
    """The named scalars of DESIGN §3 (None where a diagnostic is off or not finite)."""
    diverged = outcome.outcome == "diverged"
    s: dict[str, Scalar] = {
        "final_loss": outcome.final_loss,
        "steps": outcome.steps,
        "converged": outcome.outcome == "converged",
        "outcome": outcome.outcome,
        "diverged_step": outcome.diverged_step,
        "lr": lr,
        "parameters": sum(p.numel() for p in trainable_parameters(net).values()),
        "device": device,
        "dtype": spec.dtype,
        "kernel_method": path.method,
    }
    for of in path.heads:
        suffix = "" if of == "outputs" else "_logits"
        series = result.series.get(f"delta_k{suffix}")
        values = [v for v in series.values if v is not None] if series else []
        s[f"delta_k_max{suffix}"] = max(values) if values else None
        s[f"delta_k_final{suffix}"] = series.values[-1] if series and not diverged else None
    lam_min, lam_max, cond = path.spectrum_init
    s |= {"kernel_lambda_min_init": lam_min, "kernel_lambda_max_init": lam_max, "kernel_cond_init": cond}
    final_spectrum = kernel_spectrum(path.kernels_now["outputs"]) if path.kernel_along_path and not diverged else (None,) * 3
    s |= dict(zip(("kernel_lambda_min_final", "kernel_lambda_max_final", "kernel_cond_final"), final_spectrum))
    grad_norm = path.kernels_init["outputs"].diagonal().clamp(min=0).sqrt().max().item()
    hessian_init, hessian_final = path.hessian.get("init"), path.hessian.get("final")
    s["grad_norm_init"] = grad_norm
    s["hessian_norm_init"] = hessian_init.norm if hessian_init else None
    s["hessian_norm_final"] = hessian_final.norm if hessian_final else None
    s["hessian_grad_ratio_init"] = hessian_grad_ratio(hessian_init) if hessian_init else None
    s["hessian_kernel_ratio_init"] = hessian_grad_ratio(hessian_init, power=2) if hessian_init else None
    weight_change = path.weight_change_now if not diverged else None
    s["weight_change_l2"] = weight_change[0] if weight_change else None
    s["weight_change_linf"] = weight_change[1] if weight_change else None
    s["linearization_error_final"] = None if diverged else path.linearization_now.get("outputs")
    if "logits" in path.heads:
        s["linearization_error_final_logits"] = None if diverged else path.linearization_now.get("logits")
    s["wall_time_s"] = wall_time_s
    for name, value in s.items():
        result.set(name, value)
    result.artifacts.update(path.artifacts())


def hessian_grad_ratio(report: HessianReport, power: int = 1) -> float:
    """max over the Hessian's probe points i and outputs a of ‖∇²f_a(x_i)‖ / ‖∇f_a(x_i)‖^power.

    power 2 divides by the kernel's diagonal K[(i,a),(i,a)] = ‖∇f_a(x_i)‖²: the Hessian relative to
    the kernel, which a change of parameterization that rescales every layer alike leaves unchanged."""
    return max(h / g**power for row_h, row_g in zip(report.norms, report.grad_norms) for h, g in zip(row_h, row_g) if g > 0)
