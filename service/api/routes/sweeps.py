"""/v1/sweeps: a grid of jobs over dotted spec paths, its table, its power-law fits and their plot."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query, Response
from pydantic import ValidationError

from analysis import sweep_table
from analysis.sweep_plot import MEDIA_TYPES, render_fits
from analysis.sweep_table import fit_results
from api_schemas import problems as types
from api_schemas.problems import FieldError
from api_schemas.sweeps import FitSpec, Sweep, SweepRow, SweepSpec
from config.settings import Settings
from service import quota
from service.api.deps import BrokerDep, OwnerDep, ScopeDep, SessionDep, SettingsDep
from service.api.routes import StrictJSONRoute
from service.api.routes.jobs import PROBLEM, as_utc
from service.caps import check_spec_caps
from service.grid import GridError, expand_grid, grid_size
from service.idempotency import spec_hash
from service.problems import ProblemError
from service.uploads import resolve_uploads
from store import models, sweeps_repo
from store.sweeps_repo import NewJob
from workers.queue import Broker

log = logging.getLogger(__name__)

NOT_FOUND = {404: {**PROBLEM, "description": "no such sweep (or not yours)"}}
SWEEP_EXAMPLES = {
    "fig1": {
        "summary": "ΔK vs width for a linear and a swish head, two seeds",
        "value": {
            "name": "fig1-mini",
            "base": {"model": {"hidden": [100], "activation": "tanh"}, "training": {"max_steps": 500}},
            "grid": {"model.hidden.0": [100, 300, 1000], "model.output_activation": ["identity", "swish"], "seed": [0, 1]},
            "fits": [{"y": "delta_k_max", "x": "model.hidden.0", "group_by": ["model.output_activation"]}],
        },
    }
}

router = APIRouter(prefix="/v1/sweeps", tags=["sweeps"], route_class=StrictJSONRoute)


@router.post(
    "",
    status_code=202,
    response_model=Sweep,
    summary="Submit a sweep",
    responses={422: {**PROBLEM, "description": "invalid grid or spec, or a cap exceeded"},
               429: {**PROBLEM, "description": "too many queued + running jobs"}},
)
def create_sweep(
    spec: Annotated[SweepSpec, Body(openapi_examples=SWEEP_EXAMPLES)],
    response: Response,
    session: SessionDep,
    owner: OwnerDep,
    settings: SettingsDep,
    broker: BrokerDep,
) -> Sweep:
    """Expand the grid, store the sweep and one job per point in one transaction, publish them as a group."""
    return submit_sweep(spec, response, session, owner, settings, broker)


@router.get("/{sweep_id}", response_model=Sweep, responses=NOT_FOUND, summary="Retrieve a sweep, its table and fits")
def retrieve_sweep(sweep_id: str, session: SessionDep, scope: ScopeDep) -> Sweep:
    sweep = _owned_sweep(session, scope, sweep_id)
    return sweep_resource(sweep, sweeps_repo.sweep_jobs(session, sweep.id))


@router.post("/{sweep_id}/cancel", status_code=202, response_model=Sweep, responses=NOT_FOUND, summary="Cancel a sweep")
def cancel_sweep(sweep_id: str, session: SessionDep, scope: ScopeDep) -> Sweep:
    """Queued jobs end cancelled at once; running ones stop at their next step; finished ones stay."""
    sweep = _owned_sweep(session, scope, sweep_id)
    sweeps_repo.request_cancel(session, sweep)
    session.refresh(sweep)
    return sweep_resource(sweep, sweeps_repo.sweep_jobs(session, sweep.id))


@router.get(
    "/{sweep_id}/plot",
    response_class=Response,
    responses={200: {"content": {media: {} for media in MEDIA_TYPES.values()}}, **NOT_FOUND},
    summary="Log–log plot of a summary scalar against a grid path, with fitted lines",
)
def plot_sweep(
    sweep_id: str,
    session: SessionDep,
    scope: ScopeDep,
    x: Annotated[str | None, Query(max_length=200, description="dotted spec path; default: the first fit's x")] = None,
    y: Annotated[str | None, Query(max_length=100, description="summary scalar; default: the first fit's y")] = None,
    format: Annotated[Literal["png", "svg"], Query()] = "png",
) -> Response:
    sweep = _owned_sweep(session, scope, sweep_id)
    fit = _plotted_fit(sweep, x, y)
    fits = fit_results(sweep_table.table(sweep.spec, sweeps_repo.sweep_jobs(session, sweep.id)), fit)
    return Response(render_fits(fits, x=fit.x, y=fit.y, fmt=format), media_type=MEDIA_TYPES[format])


def submit_sweep(spec: SweepSpec, response: Response, session, owner: str, settings: Settings, broker: Broker) -> Sweep:
    """Shared by POST /v1/sweeps and POST /v1/presets/{name}."""
    size = grid_size(spec.grid)
    if size > settings.max_sweep_jobs:
        message = f"the grid has {size} points; the cap is {settings.max_sweep_jobs} (setting max_sweep_jobs)"
        raise ProblemError(422, message, type=types.RESOURCE_CAP, title="Request exceeds a resource cap",
                           errors=[FieldError(field="grid", message=message, limit=settings.max_sweep_jobs, value=size)])
    try:
        points = expand_grid(with_sweep_tags(spec), spec.grid)
    except GridError as error:
        raise ProblemError(422, str(error), type=types.VALIDATION, title="Request failed validation",
                           errors=[FieldError(field=error.field, message=str(error))]) from None
    points = [dataclasses.replace(point, spec=resolve_uploads(point.spec, session, owner)) for point in points]
    parameters = [_checked_caps(point, settings) for point in points]
    documents = [point.spec.model_dump(mode="json") for point in points]
    with quota.reserve(session, owner, len(points), settings):
        jobs = [NewJob(document, spec_hash(document), count) for document, count in zip(documents, parameters)]
        sweep, job_ids = sweeps_repo.create_sweep(session, owner=owner, spec=spec.model_dump(mode="json"), jobs=jobs)
        session.commit()
    try:
        broker.enqueue_group(job_ids)
    except Exception as error:
        log.warning("sweep %s stored but not published yet (the reaper retries): %s", sweep.id, error)
    response.headers["Location"] = f"{settings.public_url.rstrip('/')}/v1/sweeps/{sweep.id}"
    response.headers["Retry-After"] = str(settings.retry_after_s)
    return sweep_resource(sweep, sweeps_repo.sweep_jobs(session, sweep.id))


def with_sweep_tags(spec: SweepSpec) -> dict:
    """The base spec with the sweep's tags added, so every job carries (and is filtered by) them."""
    tags = spec.base.get("tags", [])
    if not spec.tags or not isinstance(tags, list):
        return spec.base
    return {**spec.base, "tags": list(dict.fromkeys([*tags, *spec.tags]))}


def sweep_resource(sweep: models.Sweep, jobs: list[models.Job]) -> Sweep:
    rows = sweep_table.table(sweep.spec, jobs)
    counts = Counter(job.status for job in jobs)
    fits = [result for fit in sweep.spec.get("fits", []) for result in fit_results(rows, FitSpec(**fit))]
    return Sweep(
        id=sweep.id,
        name=sweep.name,
        tags=list(sweep.spec.get("tags", [])),
        status=sweep_table.derive_status(counts, sweep.cancel_requested),
        counts={status: counts[status] for status in models.JOB_STATUSES},
        total=len(jobs),
        cancel_requested=sweep.cancel_requested,
        created_at=as_utc(sweep.created_at),
        spec=sweep.spec,
        table=[SweepRow(job_id=row.job_id, status=row.status, values=row.values, summary=row.summary) for row in rows],
        fits=fits,
    )


def _checked_caps(point, settings: Settings) -> int:
    try:
        return check_spec_caps(point.spec, settings)
    except ProblemError as error:
        error.problem = error.problem.model_copy(update={"detail": f"grid point {point.values}: {error.problem.detail}"})
        raise


def _plotted_fit(sweep: models.Sweep, x: str | None, y: str | None) -> FitSpec:
    fits = [FitSpec(**fit) for fit in sweep.spec.get("fits", [])]
    for fit in fits:
        if (x is None or fit.x == x) and (y is None or fit.y == y):
            return fit
    if x is None or y is None:
        raise ProblemError(422, "the sweep asked for no fit of that kind: pass both x and y", type=types.VALIDATION,
                           errors=[FieldError(field="x" if x is None else "y", message="required: the sweep has no matching fit")])
    try:
        return FitSpec(x=x, y=y)
    except ValidationError:
        raise ProblemError(422, f"x = {x!r} is not a dotted spec path like model.hidden.0", type=types.VALIDATION,
                           errors=[FieldError(field="x", message="not a dotted spec path", value=x)]) from None


def _owned_sweep(session, scope: str | None, sweep_id: str) -> models.Sweep:
    sweep = sweeps_repo.get_sweep(session, scope, sweep_id)
    if sweep is None:
        raise ProblemError(404, "no such sweep")
    return sweep
