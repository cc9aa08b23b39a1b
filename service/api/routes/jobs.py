"""/v1/jobs: create (or estimate: dry_run), list, retrieve, metrics, updates (a job and its new metric points),
cancel, delete; a job's artifacts are served by service/api/routes/artifacts.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Header, Query, Response

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.resources import (
    Job,
    JobDryRun,
    JobPage,
    JobStatus,
    JobUpdate,
    Progress,
    Series,
)
from ntklab.api_schemas.spec import JobSpec
from ntklab.config.settings import Settings
from ntklab.service import submission
from ntklab.service.api import paging
from ntklab.service.api.deps import BrokerDep, OwnerDep, PublicUrlDep, ScopeDep, SessionDep, SettingsDep
from ntklab.service.api.resources import as_utc
from ntklab.service.api.routes import PROBLEM, FiniteJSONResponse, StrictJSONRoute
from ntklab.service.estimates import job_estimate
from ntklab.service.idempotency import HEADER
from ntklab.service.problems import ProblemError
from ntklab.store import jobs_repo, models
from ntklab.store.sweep_specs import job_spec

NOT_FOUND = {404: {**PROBLEM, "description": "no such job (or not yours)"}}
SinceStep = Annotated[int | None, Query(ge=0, le=2**31 - 1, description="only the points with a greater step")]

SPEC_EXAMPLES = {
    "linear-head": {
        "summary": "Wide MLP with a linear head (the kernel stays nearly constant)",
        "value": {
            "name": "fig1-identity-m1000",
            "tags": ["fig1"],
            "model": {"kind": "mlp", "hidden": [1000], "activation": "relu", "output_activation": "identity"},
            "data": {"kind": "gaussian_mixture", "n_train": 64, "input_dim": 16, "classes": 2, "targets": "signed"},
            "training": {"optimizer": "gd", "loss": "mse", "max_steps": 2000, "target_loss": 0.001},
        },
    },
    "swish-head": {
        "summary": "The same network with a swish head (the kernel moves)",
        "value": {
            "name": "fig1-swish-m1000",
            "tags": ["fig1"],
            "model": {"kind": "mlp", "hidden": [1000], "output_activation": "swish"},
            "data": {"kind": "gaussian_mixture", "n_train": 64, "input_dim": 16, "targets": "signed"},
        },
    },
    "bottleneck": {
        "summary": "A narrow bottleneck layer between two wide ones",
        "value": {
            "name": "bottleneck",
            "model": {"kind": "mlp", "hidden": [2000, 5, 2000]},
            "data": {"kind": "builtin", "name": "iris", "n_train": 128, "targets": "onehot"},
            "training": {"max_steps": 1000},
        },
    },
    "inline-data": {
        "summary": "Your own points: x is n × d, y is n × O",
        "value": {
            "model": {"hidden": [512]},
            "data": {
                "kind": "inline",
                "x": [[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]],
                "y": [1.0, 1.0, 0.0, 0.0],
            },
            "training": {"max_steps": 500},
            "diagnostics": {"hessian": None},
        },
    },
}

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=StrictJSONRoute)


@router.post(
    "",
    status_code=202,
    response_model=Job,
    summary="Submit a job, or estimate it (dry_run)",
    responses={
        200: {"model": JobDryRun, "description": "dry_run=true: the estimate; nothing stored or queued"},
        413: {**PROBLEM, "description": "body larger than max_body_bytes"},
        422: {**PROBLEM, "description": "invalid spec, a resource cap exceeded, or an Idempotency-Key reused"},
        429: {**PROBLEM, "description": "too many queued + running jobs of this key, or too many requests per second"},
    },
)
def create_job(
    spec: Annotated[JobSpec, Body(openapi_examples=SPEC_EXAMPLES)],
    response: Response,
    session: SessionDep,
    owner: OwnerDep,
    settings: SettingsDep,
    broker: BrokerDep,
    public_url: PublicUrlDep,
    idempotency_key: Annotated[
        str | None, Header(alias=HEADER, description="retry-safe: same key + same body → the first answer")
    ] = None,
    dry_run_: Annotated[
        bool, Query(alias="dry_run", description="answer the estimate (200) and store nothing")
    ] = False,
) -> Job | FiniteJSONResponse:
    """Validate, check the caps, store and enqueue a job; poll `Location` until its status is final.

    With `dry_run=true`, the same validation and caps, then the job's estimate (200, JobDryRun): memory, FLOPs
    and seconds per phase at this deployment's rates, and per worker class calibrated by its recent succeeded jobs' measured
    phase timings. Nothing is stored or queued; the Idempotency-Key and the
    queued-jobs quota are not consulted.
    """
    if dry_run_:
        answer = submission.dry_run_job(spec, idempotency_key, session, owner, settings)
        return FiniteJSONResponse(answer.model_dump(mode="json"))
    submitted = submission.submit_job(spec, idempotency_key, session, owner, settings, broker)
    job = submitted.row
    response.headers["Location"] = f"{public_url}/v1/jobs/{job.id}"
    response.headers["Retry-After"] = str(settings.retry_after_s)
    if submitted.replayed:
        response.headers["Idempotent-Replayed"] = "true"
        return job_resource(job, jobs_repo.spec_tags(job), settings, with_spec=True)
    return job_resource(job, list(dict.fromkeys(spec.tags)), settings, with_spec=True)  # as sent, first of each


@router.get("", response_model=JobPage, summary="List jobs, newest first")
def list_jobs(
    session: SessionDep,
    scope: ScopeDep,
    settings: SettingsDep,
    status: Annotated[list[JobStatus] | None, Query(description="repeat to match several")] = None,
    tag: Annotated[str | None, Query(max_length=64)] = None,
    sweep_id: Annotated[str | None, Query(max_length=40)] = None,
    limit: Annotated[
        int, Query(ge=1, description="page size, at most settings.max_page_size")
    ] = paging.DEFAULT_PAGE_SIZE,
    after: Annotated[str | None, Query(max_length=64, description="the `next` cursor of the previous page")] = None,
) -> JobPage:
    limit = paging.checked_limit(limit, settings, "jobs")
    where = jobs_repo.JobFilter(statuses=tuple(status or ()), tag=tag, sweep_id=sweep_id)
    jobs, has_more = jobs_repo.list_page(session, scope, where, limit, paging.after_seq(after))
    tags = jobs_repo.tags_of(session, [job.id for job in jobs])
    return JobPage(
        data=[job_resource(job, tags[job.id], settings, with_spec=False) for job in jobs],
        has_more=has_more,
        next=paging.next_cursor(jobs, has_more),
    )


@router.get("/{job_id}", response_model=Job, responses=NOT_FOUND, summary="Retrieve a job")
def retrieve_job(job_id: str, session: SessionDep, scope: ScopeDep, settings: SettingsDep) -> Job:
    job = _owned_job(session, scope, job_id)
    return job_resource(job, jobs_repo.spec_tags(job), settings, with_spec=True)


@router.get("/{job_id}/metrics", response_model=dict[str, Series], responses=NOT_FOUND, summary="Metric series")
def job_metrics(
    job_id: str,
    session: SessionDep,
    scope: ScopeDep,
    names: Annotated[
        str | None, Query(max_length=2000, description="comma-separated series names; all if absent")
    ] = None,
    since_step: SinceStep = None,
) -> dict[str, Series]:
    """`{name: {step: [...], value: [...]}}` for the series recorded so far; unknown names are left out.

    With `since_step`, only the points after that step (a series without any is left out): a reader that
    holds the series up to step N appends what `since_step=N` returns.
    """
    job = _owned_job(session, scope, job_id)
    return _series(session, job.id, names, since_step)


@router.get(
    "/{job_id}/updates", response_model=JobUpdate, responses=NOT_FOUND, summary="A job and its new metric points"
)
def job_updates(
    job_id: str,
    session: SessionDep,
    scope: ScopeDep,
    settings: SettingsDep,
    names: Annotated[
        str | None, Query(max_length=2000, description="comma-separated series names; all if absent")
    ] = None,
    since_step: SinceStep = None,
) -> JobUpdate:
    """The job (spec left out) and its metric points after `since_step`: one request per interval for a page
    that follows a running job (the dashboard) — the job row by its key and the new chunks by the index
    (job_id, last_step). A new attempt starts its series again from step 0, so when `attempts` changes, read
    again without `since_step`; so too once the job has finished (a recomputed series replaces the streamed one)."""
    job = _owned_job(session, scope, job_id)
    return JobUpdate(
        job=job_resource(job, jobs_repo.spec_tags(job), settings, with_spec=False),
        since_step=since_step,
        metrics=_series(session, job.id, names, since_step),
    )


def _series(session, job_id: str, names: str | None, since_step: int | None) -> dict[str, Series]:
    wanted = [name.strip() for name in (names or "").split(",") if name.strip()]
    series = jobs_repo.read_series(session, job_id, wanted, since_step)
    return {name: Series(step=steps, value=values) for name, (steps, values) in series.items()}


@router.post(
    "/{job_id}/cancel",
    status_code=202,
    response_model=Job,
    responses={**NOT_FOUND, 409: {**PROBLEM, "description": "the job already finished"}},
    summary="Cancel a job",
)
def cancel_job(job_id: str, session: SessionDep, scope: ScopeDep, settings: SettingsDep) -> Job:
    """queued → cancelled at once; running → `cancel_requested`, and the job stops within seconds (docs/operations.md).

    `cancel_outcome` follows the request: `pending`, then `cancelled`, or `too_late` when the
    job finished before the worker saw the request; its results
    then stand. Cancelling a cancelled job answers 202 again (a retried cancel is harmless); a
    job that already succeeded or failed is a 409.
    """
    job = _owned_job(session, scope, job_id)
    if job.status in jobs_repo.ACTIVE_STATUSES:
        jobs_repo.request_cancel(session, scope, job_id)
        job = _owned_job(session, scope, job_id, fresh=True)  # a delete may have removed it once cancelled: 404
    if job.status in ("succeeded", "failed"):
        raise ProblemError(409, f"the job already {job.status}; there is nothing to cancel", type=types.INVALID_STATE)
    return job_resource(job, jobs_repo.spec_tags(job), settings, with_spec=True)


@router.delete(
    "/{job_id}",
    status_code=204,
    response_class=Response,
    responses={**NOT_FOUND, 409: {**PROBLEM, "description": "the job has not finished; cancel it first"}},
    summary="Delete a finished job",
)
def delete_job(job_id: str, session: SessionDep, scope: ScopeDep) -> Response:
    _owned_job(session, scope, job_id)
    if not jobs_repo.delete_finished(session, scope, job_id):
        job = _owned_job(session, scope, job_id, fresh=True)  # another delete may have removed it: 404
        raise ProblemError(
            409,
            f"the job is {job.status}; only finished jobs can be deleted (cancel it first)",
            type=types.INVALID_STATE,
        )
    return Response(status_code=204)


def job_resource(job: models.Job, tags: list[str], settings: Settings, *, with_spec: bool) -> Job:
    """The job as the API shows it; with its spec, the estimate stored at submission (service/estimates.py)."""
    spec = job_spec(job) if with_spec else None
    return Job(
        id=job.id,
        name=job.name,
        status=job.status,
        tags=tags,
        sweep_id=job.sweep_id,
        parameters=job.parameters,
        attempts=job.attempts,
        device=job.device,
        cancel_requested=job.cancel_requested,
        progress=Progress(
            step=job.progress_step, total=job.progress_total, phase=job.progress_phase, eta_s=job.progress_eta_s
        ),
        summary=job.summary,
        warnings=job.warnings or [],
        error=job.error,
        created_at=as_utc(job.created_at),
        enqueued_at=as_utc(job.enqueued_at),
        started_at=as_utc(job.started_at),
        finished_at=as_utc(job.finished_at),
        spec=spec,
        estimate=job_estimate(job.estimate, spec, settings) if spec is not None else None,
    )


def _owned_job(session, scope: str | None, job_id: str, *, fresh: bool = False) -> models.Job:
    job = jobs_repo.get_job(session, scope, job_id, fresh=fresh)
    if job is None:
        raise ProblemError(404, "no such job")
    return job
