"""What the API answers: the job resource, its pages, metric series and artifacts.

Times are ISO 8601 in UTC. Every number is finite: JSON never carries NaN or Infinity
(non-finite measurements are stored as null by the worker).
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ntklab.api_schemas.run_warnings import RunWarning
from ntklab.api_schemas.spec import JobSpec
from ntklab.api_schemas.summary import JobSummary

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
CancelOutcome = Literal["pending", "cancelled", "too_late"]


class Resource(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Progress(Resource):
    """Where a job is: `step` of `total` in the phase it is in, and an estimate of the time left in that phase.

    `step` and `total` count training steps, except in phase "hessian", where they count Hessian-vector
    products done of those planned (docs/diagnostics.md, "Timings and progress").
    """

    step: int
    total: int
    phase: str = Field(
        description="queued, starting, data, build, kernel, hessian, sensitivity, train, storage, succeeded, failed, "
        "cancelled, …"
    )
    eta_s: float | None = None


class JobError(BaseModel):
    """Why a job failed: `type` (InvalidSpec, TimeLimit, OutOfMemory, WorkerLost, …) and a message; more keys may follow.

    Out of memory: `code` is "out_of_memory" with `requested_bytes`, the allocation that failed, where
    the allocator said; "exceeds_device_memory" when the worker refused to start the job because its
    estimate exceeds the device (`estimate_bytes`, `device_bytes`).
    """

    model_config = ConfigDict(extra="allow")

    type: str
    message: str


class EstimatePhase(Resource):
    """One phase of the time estimate: seconds = flops / R + operations · t_op, with R and t_op the estimate's
    `rates` (R / 8 for the model Hessian, whose FLOPs run memory-bound); `what` spells the sum out."""

    name: str = Field(
        description="training, kernel, hessian, path, constants, infinite_width, hessian_spectrum, "
        "loss_hessian, sensitivity, kernel_trace"
    )
    seconds: float
    flops: float
    operations: float = Field(description="framework operations dispatched, whatever their size")
    what: str


class EstimateRates(Resource):
    """The rates the time estimate used and where they come from.

    `source` is "default" for the shipped calibration (bench/bench_time_estimate.py on one CPU core of the
    reference machine, docs/benchmarks.md, "Time estimate"), "settings" when this deployment set
    estimate_flops_per_s or estimate_seconds_per_op. These rates are not learnt from finished jobs: the dry run's
    `by_worker_class` shows the estimate calibrated by measured throughput beside them.
    """

    flops_per_s: float
    seconds_per_op: float
    source: Literal["default", "settings"]
    detail: str


class JobEstimate(Resource):
    """What the job should take, estimated from its spec alone (docs/operations.md, "Memory and work estimate").

    memory_bytes is the estimated peak and memory the terms it is made of (data, weights,
    constants, activations, kernel, cotangents, lanczos, infinite_width, spectrum, loss_hessian);
    flops the estimated work and work its terms (training, kernel, hessian, path, constants,
    infinite_width, hessian_spectrum, loss_hessian, sensitivity, kernel_trace). Steps are counted to
    training.max_steps; constants (an ONNX model's folded constant subgraphs) are 0 for every other model.
    seconds is the estimated time and time its terms: each term's FLOPs at estimate_flops_per_s plus the
    framework operations it dispatches at estimate_seconds_per_op (the per-layer and per-node overhead),
    at this deployment's rates (`rates`); `phases` lists the same terms with their FLOPs, operations and sum.
    """

    memory_bytes: int
    flops: float
    memory: dict[str, int] = Field(description="bytes per term")
    work: dict[str, float] = Field(description="FLOPs per term")
    seconds: float | None = Field(default=None, description="estimated seconds, at `rates`")
    time: dict[str, float] = Field(default_factory=dict, description="seconds per term")
    phases: list[EstimatePhase] = Field(default_factory=list, description="the time terms, largest first, explained")
    rates: EstimateRates | None = Field(default=None, description="the FLOP rate and per-operation time used")


class EstimateCap(Resource):
    """One estimate cap of this deployment: the setting, its limit and the job's estimated value (≤ limit)."""

    setting: Literal["max_job_memory_bytes", "max_job_flops", "max_job_seconds"]
    limit: float
    value: float


class CalibratedPhase(Resource):
    """One phase of a worker class's calibrated estimate: seconds = factor × the phase's seconds at `rates`.

    factor is the median, over the class's recent succeeded jobs that ran the phase, of measured / estimated
    seconds (training per step run: (timings.training / steps) / (time.training / max_steps)). A phase with
    no factor (null) keeps its seconds at `rates`: either no recent job of the class ran it, or its measured
    time does not compare with its estimate (`note` says which).
    """

    name: str
    seconds: float
    factor: float | None = Field(description="median measured / estimated seconds; null: uncalibrated")
    jobs: int = Field(description="the jobs the median is of")
    note: str | None = None


class WorkerClassEstimate(Resource):
    """The estimate calibrated by one worker class's measured throughput (its jobs' `device` before any index:
    "cpu", "cuda")."""

    worker_class: str
    devices: list[str] = Field(description="the devices of the jobs it rests on")
    jobs: int = Field(description="the class's recent succeeded jobs read (at most the calibration window)")
    seconds: float = Field(description="Σ phases' seconds: calibrated where a factor is, else at `rates`")
    phases: list[CalibratedPhase] = Field(description="every time term, largest first")


class JobDryRun(JobEstimate):
    """POST /v1/jobs?dry_run=true: the estimate the job would carry, and the caps it was checked against.

    The spec passed every check a submission makes (validation, uploads, caps), so every value is within its
    limit; a spec over a cap is the submission's 422. Nothing was stored or queued. `by_worker_class` is the
    same estimate calibrated from each worker class's recent succeeded jobs (empty before any has finished;
    `calibration` says what it rests on); the caps are checked at `rates`, never at a calibration.
    """

    parameters: int = Field(description="trainable parameters, as the job would be stored with")
    caps: list[EstimateCap]
    by_worker_class: dict[str, WorkerClassEstimate] = Field(
        default_factory=dict, description="worker class → the estimate calibrated by its measured throughput"
    )
    calibration: str = Field(default="", description="what by_worker_class rests on, or why it is empty")


class Job(Resource):
    """A job as the API shows it. `spec` is the validated spec with every default filled in.

    `spec` and `estimate` are present on GET /v1/jobs/{id} and on create; list pages leave them
    out (null) because inline data can make the spec large.
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "id": "job_3f2a9c0e6b1d4e8f9a7b5c3d2e1f0a9b",
                    "object": "job",
                    "name": "fig1-swish-m1000",
                    "status": "running",
                    "tags": ["fig1"],
                    "sweep_id": None,
                    "parameters": 19001,
                    "attempts": 1,
                    "device": "cpu",
                    "cancel_requested": False,
                    "progress": {"step": 1200, "total": 5000, "phase": "train", "eta_s": 14.2},
                    "summary": None,
                    "warnings": [],
                    "error": None,
                    "created_at": "2025-01-01T12:00:00Z",
                    "enqueued_at": "2025-01-01T12:00:00Z",
                    "started_at": "2025-01-01T12:00:01Z",
                    "finished_at": None,
                    "spec": None,
                }
            ]
        },
    )

    id: str
    object: Literal["job"] = "job"
    name: str | None
    status: JobStatus
    tags: list[str]
    sweep_id: str | None
    parameters: int = Field(description="trainable parameters p of the model")
    attempts: int = Field(description="how many times a worker claimed the job (2+ after a worker was lost)")
    device: str | None = Field(description="where it ran: cpu, cuda:0, …")
    cancel_requested: bool
    cancel_outcome: CancelOutcome | None = Field(
        default=None,
        description="what became of a cancel request (null when none was made): pending until the worker acts on it, "
        "cancelled, or too_late when the job had already finished (succeeded or failed) before the worker saw it; "
        "its results then stand. Derived from status and cancel_requested.",
    )
    progress: Progress
    summary: JobSummary | None = Field(
        description="named scalars once finished (final_loss, delta_k_max, …; api_schemas/summary.py) and `timings`, "
        "the seconds spent per phase (data, build, kernel, hessian, sensitivity, linearization, training, storage, …)"
    )
    warnings: list[RunWarning] = Field(
        default_factory=list,
        description="why the finished job's numbers should not be read at face value (target_loss_not_reached, "
        "kernel_dominated_by_group, …: docs/api.md, 'Warnings'); empty when there is nothing to say",
    )
    error: JobError | None
    created_at: dt.datetime
    enqueued_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    spec: JobSpec | None
    estimate: JobEstimate | None = Field(default=None, description="peak memory and FLOPs estimated from the spec")

    @model_validator(mode="after")
    def _cancel_outcome(self):
        if not self.cancel_requested:
            self.cancel_outcome = None
        elif self.status in ("queued", "running"):
            self.cancel_outcome = "pending"
        else:
            self.cancel_outcome = "cancelled" if self.status == "cancelled" else "too_late"
        return self


class JobPage(Resource):
    """One page of jobs, newest first; pass `next` as `after` to get the following page."""

    object: Literal["list"] = "list"
    data: list[Job]
    has_more: bool
    next: str | None = Field(description="opaque cursor for the next page, null on the last page")


class Series(Resource):
    """values[i] was measured at training step step[i]; a value is null where it was not finite."""

    step: list[int]
    value: list[float | None]


class JobUpdate(Resource):
    """What a page watching a running job reads each interval, in one request: the job (without its spec)
    and the metric points recorded after step `since_step` (every point when the request gave none)."""

    object: Literal["job_update"] = "job_update"
    job: Job
    since_step: int | None
    metrics: dict[str, Series]


class ArtifactInfo(Resource):
    name: str
    media_type: str
    size: int = Field(description="bytes")
    url: str
    created_at: dt.datetime


class ArtifactList(Resource):
    object: Literal["list"] = "list"
    data: list[ArtifactInfo]
