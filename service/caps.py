"""Resource caps, every one a setting: a request over one is refused before anything is stored.

Spec caps (422, one FieldError per cap exceeded, with the limit and the value):
    model.hidden.i   width         ≤ max_width   (a graph: model.layers.….width of every layer)
    model            parameters p  ≤ max_parameters   (p counted by arithmetic, nothing allocated)
    data.probe.n     probe points  ≤ max_probe, and kernel entries (n·O)² ≤ max_kernel_entries
    diagnostics.hessian.iterations  Lanczos basis iterations × p (float64) ≤ max_lanczos_entries
    data.n_train     training points (data.x for inline data) ≤ max_train_points
    data             inline values n·d + n·O ≤ max_inline_values
    training.max_steps             ≤ max_steps
    estimate         peak memory ≤ max_job_memory_bytes, work ≤ max_job_flops, time ≤ max_job_seconds
                     (planner/estimate.py, from the spec alone, at the rates estimate_flops_per_s and
                     estimate_seconds_per_op); the error names the largest term, its size and formula, on
                     the field that drives it (MEMORY_FIELDS, WORK_FIELDS: e.g. the infinite-width
                     layer maps on diagnostics.infinite_width, the Hessian spectrum's probes on
                     diagnostics.hessian_spectrum.probes, the loss-Hessian split on diagnostics.loss_hessian)
Body size (413): Content-Length, and the bytes actually streamed, ≤ max_body_bytes — checked
by `BodySizeLimit` before any parsing. Uploads (POST /v1/datasets, /v1/models) pass through
unbuffered: their routes stream the body to disk against max_upload_bytes (service/uploads.py).
Uploads named by a spec (data.kind = "dataset", model.kind = "onnx") are looked up by
service/uploads.py:resolve_uploads first, which fills in their stored shapes and parameter count.
Active jobs (429): queued + running jobs of one owner < max_queued_jobs_per_key (jobs route).
"""

from __future__ import annotations

from dataclasses import dataclass

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.graph import walk
from ntklab.api_schemas.problems import FieldError
from ntklab.api_schemas.spec import BuiltinModel, GraphModel, InlineData, JobSpec, OnnxModel, input_dim, target_dim
from ntklab.config.settings import Settings
from ntklab.planner.architecture import count_parameters
from ntklab.planner.estimate import Estimate, TimeRates, estimate_job, format_bytes
from ntklab.service.problems import ProblemError, problem_response, summarize


@dataclass(frozen=True)
class CheckedSpec:
    """A spec within every cap: its trainable parameter count p and its estimate at this deployment's rates
    (None when the model cannot be planned), computed once here and stored on the job (store/job_estimates.py)."""

    parameters: int
    estimate: Estimate | None


def check_spec_caps(spec: JobSpec, settings: Settings) -> int:
    """The model's trainable parameter count p; raises a 422 problem listing every cap the spec exceeds."""
    return checked_spec(spec, settings).parameters


def checked_spec(spec: JobSpec, settings: Settings) -> CheckedSpec:
    """The spec's parameter count and estimate; raises a 422 problem listing every cap the spec exceeds."""
    violations = [
        *_width_violations(spec, settings),
        *_data_violations(spec, settings),
        *_kernel_violations(spec, settings),
        *_over("training.max_steps", "training steps", spec.training.max_steps, settings.max_steps),
    ]
    parameters, estimate = 0, None
    if not any(violation.field.startswith(("model.hidden", "model.layers")) for violation in violations):
        parameters, model_violations = _parameter_violations(spec, settings)
        estimate = _planned(spec, settings)
        violations += model_violations + _lanczos_violations(spec, parameters, settings)
        violations += _estimate_violations(spec, estimate, settings)
    if violations:
        raise ProblemError(
            422,
            summarize(violations),
            type=types.RESOURCE_CAP,
            title="Request exceeds a resource cap",
            errors=violations,
        )
    return CheckedSpec(parameters, estimate)


def _planned(spec: JobSpec, settings: Settings) -> Estimate | None:
    """The estimate at this deployment's rates; None when the model cannot be planned (_parameter_violations names the field)."""
    try:
        return estimate_job(spec, time_rates(settings))
    except ValueError:
        return None


def _over(field: str, what: str, value: int, limit: int) -> list[FieldError]:
    if value <= limit:
        return []
    message = f"{what} {value} exceeds the cap of {limit} (by {value - limit})"
    return [FieldError(field=field, message=message, limit=limit, value=value)]


def _width_violations(spec: JobSpec, settings: Settings) -> list[FieldError]:
    """Every hidden width, or for a graph every layer's width (model.layers.3.width, nested paths too)."""
    model = spec.model
    if isinstance(model, GraphModel):
        widths = [(f"{path}.width", layer.width) for path, layer in walk(model.layers) if hasattr(layer, "width")]
    elif isinstance(model, BuiltinModel):
        widths = [(f"model.hidden.{index}", width) for index, width in enumerate(model.hidden)]
    else:
        widths = []  # an onnx model: no width fields (its parameters are capped below)
    return [violation for field, width in widths for violation in _over(field, "width", width, settings.max_width)]


def _data_violations(spec: JobSpec, settings: Settings) -> list[FieldError]:
    data = spec.data
    points_field = "data.x" if isinstance(data, InlineData) else "data.n_train"
    violations = [
        *_over(points_field, "training points", data.n_points(), settings.max_train_points),
        *_over("data.probe.n", "probe points", spec.probe_n(), settings.max_probe),
    ]
    if isinstance(data, InlineData):
        values = len(data.x) * input_dim(data) + len(data.y) * target_dim(data)
        violations += _over("data", "inline values (x and y)", values, settings.max_inline_values)
    return violations


def _kernel_violations(spec: JobSpec, settings: Settings) -> list[FieldError]:
    """The tangent kernel on the probe set is (n·O) × (n·O); every job computes it at init."""
    side = spec.probe_n() * (spec.model.output_dim or 1)
    return _over(
        "data.probe.n", f"tangent-kernel entries (n·O)² with n·O = {side}", side * side, settings.max_kernel_entries
    )


def _lanczos_violations(spec: JobSpec, parameters: int, settings: Settings) -> list[FieldError]:
    """Lanczos keeps every basis vector (full reorthogonalisation): iterations × p float64 values."""
    hessian = spec.diagnostics.hessian
    if hessian is None:
        return []
    what = f"Lanczos basis entries (iterations × parameters = {hessian.iterations} × {parameters}, float64)"
    return _over("diagnostics.hessian.iterations", what, hessian.iterations * parameters, settings.max_lanczos_entries)


MEMORY_FIELDS = {
    "data": "data.n_train",
    "weights": "model",
    "constants": "model.id",
    "activations": "model",
    "kernel": "data.probe.n",
    "cotangents": "data.probe.n",
    "lanczos": "diagnostics.hessian.iterations",
    "infinite_width": "diagnostics.infinite_width",
    "spectrum": "diagnostics.hessian_spectrum.probes",
    "loss_hessian": "diagnostics.loss_hessian",
}
WORK_FIELDS = {
    "training": "training.max_steps",
    "kernel": "diagnostics.kernel",
    "hessian": "diagnostics.hessian",
    "path": "diagnostics.kernel",
    "infinite_width": "diagnostics.infinite_width",
    "hessian_spectrum": "diagnostics.hessian_spectrum.probes",
    "loss_hessian": "diagnostics.loss_hessian.iterations",
    "constants": "model.id",
    "sensitivity": "diagnostics.layer_sensitivity",
    "kernel_trace": "data.probe.n",
}
"""The field that drives each term of the estimate (data.x for inline data)."""


def _estimate_violations(spec: JobSpec, estimate: Estimate | None, settings: Settings) -> list[FieldError]:
    """Estimated peak memory over max_job_memory_bytes, work over max_job_flops, seconds over max_job_seconds:
    each names its largest term."""
    if estimate is None:
        return []
    violations = []
    if estimate.memory_bytes > settings.max_job_memory_bytes:
        term = estimate.memory_dominant
        violations.append(
            _estimate_violation(
                spec,
                MEMORY_FIELDS[term.name],
                f"estimated peak memory {format_bytes(estimate.memory_bytes)}",
                f"{format_bytes(settings.max_job_memory_bytes)} (setting max_job_memory_bytes)",
                f"{term.name}, {format_bytes(term.value)}: {term.what}",
                estimate.memory_bytes,
                settings.max_job_memory_bytes,
            )
        )
    if estimate.flops > settings.max_job_flops:
        term = estimate.work_dominant
        violations.append(
            _estimate_violation(
                spec,
                WORK_FIELDS[term.name],
                f"estimated work {estimate.flops:.3g} FLOPs",
                f"{settings.max_job_flops:.3g} FLOPs (setting max_job_flops)",
                f"{term.name}, {term.value:.3g} FLOPs: {term.what}",
                estimate.flops,
                settings.max_job_flops,
            )
        )
    if estimate.seconds > settings.max_job_seconds:
        term = estimate.time_dominant
        violations.append(
            _estimate_violation(
                spec,
                WORK_FIELDS[term.name],
                f"estimated time {estimate.seconds:.4g} s",
                f"{settings.max_job_seconds:.4g} s (setting max_job_seconds)",
                f"{term.name}, {term.value:.3g} s: {term.what}",
                estimate.seconds,
                settings.max_job_seconds,
            )
        )
    return violations


def time_rates(settings: Settings) -> TimeRates:
    """The time estimate's calibration (settings estimate_flops_per_s, estimate_seconds_per_op)."""
    return TimeRates(flops_per_s=settings.estimate_flops_per_s, seconds_per_op=settings.estimate_seconds_per_op)


def _estimate_violation(
    spec: JobSpec, field: str, what: str, cap: str, largest: str, value: float, limit: float
) -> FieldError:
    if field == "data.n_train" and isinstance(spec.data, InlineData):
        field = "data.x"
    message = f"{what} exceeds the cap of {cap}; the largest term is {largest}"
    return FieldError(field=field, message=message, limit=int(limit), value=int(value))


def _parameter_violations(spec: JobSpec, settings: Settings) -> tuple[int, list[FieldError]]:
    if isinstance(spec.model, OnnxModel):
        if spec.model.stored is None:
            return 0, [FieldError(field="model.id", message="the onnx model has not been looked up (resolve_uploads)")]
        return spec.model.stored.parameters, _over(
            "model", "trainable parameters", spec.model.stored.parameters, settings.max_parameters
        )
    input_shape = spec.image_shape() or (input_dim(spec.data),)
    try:
        parameters = count_parameters(spec.model, input_shape)
    except ValueError as error:
        message = str(error)
        field = message.split()[0] if message.startswith("model.") else "model"
        return 0, [FieldError(field=field, message=message)]
    return parameters, _over("model", "trainable parameters", parameters, settings.max_parameters)


class BodySizeLimit:
    """ASGI middleware: 413 problem when a request body exceeds `max_bytes`, before the app sees a byte.

    The declared Content-Length is checked first; a body without one (chunked) is buffered
    up to the limit and then replayed to the app as one message. A POST to one of the
    `streamed` paths passes through untouched: its route streams the body to disk under its
    own cap (uploads: max_upload_bytes).
    """

    def __init__(self, app, max_bytes: int, streamed: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.streamed = streamed

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or (scope.get("method") == "POST" and scope.get("path") in self.streamed):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send, declared, "declares")
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay(message, receive), send)
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._refuse(scope, receive, send, len(body), "sent at least")
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay({"type": "http.request", "body": bytes(body)}, receive), send)

    async def _refuse(self, scope, receive, send, size: int, verb: str) -> None:
        error = FieldError(
            field="body",
            message=f"the request {verb} {size} bytes; the cap is {self.max_bytes} (setting max_body_bytes)",
            limit=self.max_bytes,
            value=size,
        )
        problem = ProblemError(413, error.message, type=types.BODY_TOO_LARGE, errors=[error]).problem
        problem = problem.model_copy(update={"instance": scope.get("path")})
        await problem_response(problem, {"Connection": "close"})(scope, receive, send)


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(first: dict, receive):
    pending = [first]

    async def replayed() -> dict:
        return pending.pop() if pending else await receive()

    return replayed
