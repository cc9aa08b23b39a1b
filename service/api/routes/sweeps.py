"""/v1/sweeps: a grid of jobs over dotted spec paths, its table, its power-law fits and their plot.

Submitting (POST /v1/sweeps, and POST /v1/presets/{name} through `submit_sweep`): the base
is validated once and stored once, on the sweep row; the grid's points are made, checked
and reduced to their patches one at a time (service/grid.py, store/sweep_specs.py), their
bytes counted against max_sweep_bytes as they come; then the sweep and all its jobs are
stored in one transaction and published as a group. Time and memory follow the base once
plus the points' patches, not points × base. An `Idempotency-Key` is honoured as for jobs:
the same key and body answer the sweep the key made (`Idempotent-Replayed: true`), the same
key with another body is a 422, and concurrent duplicates store one sweep (a unique index on
(owner, key), the loser answering the winner's sweep).

Reading: counts, status and fits cover all the sweep's jobs; the table is paged in grid
order (`limit`, `after`). A sweep resource is encoded by pydantic-core in one pass, its
stored spec included as it is, since a base of a million inline numbers would otherwise be
validated and encoded again on every poll.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Query, Response
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError

from analysis import sweep_table
from analysis.fit_figure import chosen_fits
from analysis.figure_titles import figure_title
from analysis.sweep_plot import MEDIA_TYPES, render_fits
from analysis.sweep_table import fit_results
from api_schemas import problems as types
from api_schemas.problems import FieldError
from api_schemas.sweeps import FitResult, FitSpec, Sweep, SweepPage, SweepSpec, SweepStatus, SweepSummary
from config.settings import Settings
from service import quota
from service.api import paging
from service.api.deps import BrokerDep, OwnerDep, PublicUrlDep, ScopeDep, SessionDep, SettingsDep
from service.api.routes import StrictJSONRoute
from service.api.routes.jobs import DEFAULT_PAGE_SIZE, PROBLEM, as_utc, hold_uploads
from service.caps import check_spec_caps
from service.grid import GridError, GridPoint, SweepBase, grid_points, grid_size, point_document, sweep_base
from service.idempotency import HEADER, check_key, compact_json, digest, refuse_reuse, sweep_job_hash
from service.problems import ProblemError
from service.uploads import resolve_uploads
from store import models, sweeps_repo
from store.sweep_specs import patch_between
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
IDEMPOTENCY_KEY = Header(alias=HEADER, description="retry-safe: same key + same body → the first answer, not a second sweep")
SUBMIT_PROBLEMS = {
    422: {**PROBLEM, "description": "invalid grid or spec, a cap exceeded (max_sweep_jobs, max_sweep_bytes, …), "
                                    "or an Idempotency-Key reused with another body"},
    429: {**PROBLEM, "description": "too many queued + running jobs"},
}

router = APIRouter(prefix="/v1/sweeps", tags=["sweeps"], route_class=StrictJSONRoute)


@router.post("", status_code=202, response_model=Sweep, summary="Submit a sweep", responses=SUBMIT_PROBLEMS)
def create_sweep(
    spec: Annotated[SweepSpec, Body(openapi_examples=SWEEP_EXAMPLES)],
    session: SessionDep,
    owner: OwnerDep,
    settings: SettingsDep,
    broker: BrokerDep,
    public_url: PublicUrlDep,
    idempotency_key: Annotated[str | None, IDEMPOTENCY_KEY] = None,
) -> Response:
    """Expand the grid, store the sweep and one job per point in one transaction, publish them as a group."""
    return submit_sweep(spec, session, owner, settings, broker, idempotency_key, public_url)


@router.get("", response_model=SweepPage, summary="List sweeps, newest first")
def list_sweeps(
    session: SessionDep,
    scope: ScopeDep,
    settings: SettingsDep,
    status: Annotated[list[SweepStatus] | None, Query(description="the sweep's derived status; repeat to match several")] = None,
    tag: Annotated[str | None, Query(max_length=64, description="a tag of the sweep itself")] = None,
    limit: Annotated[int, Query(ge=1, description="page size, at most settings.max_page_size")] = DEFAULT_PAGE_SIZE,
    after: Annotated[str | None, Query(max_length=64, description="the `next` cursor of the previous page")] = None,
) -> SweepPage:
    """The caller's sweeps (every owner's for the admin key) without their spec, table or fits."""
    limit = paging.checked_limit(limit, settings, "sweeps")
    where = sweeps_repo.SweepFilter(statuses=tuple(status or ()), tag=tag)
    sweeps, has_more = sweeps_repo.list_page(session, scope, where, limit, paging.after_seq(after))
    counts = sweeps_repo.counts_of(session, [sweep.id for sweep in sweeps])
    return SweepPage(
        data=[sweep_summary(sweep, counts[sweep.id]) for sweep in sweeps],
        has_more=has_more,
        next=paging.next_cursor(sweeps, has_more),
    )


@router.get("/{sweep_id}", response_model=Sweep, responses=NOT_FOUND, summary="Retrieve a sweep, its table and fits")
def retrieve_sweep(
    sweep_id: str,
    session: SessionDep,
    scope: ScopeDep,
    settings: SettingsDep,
    limit: Annotated[int | None, Query(ge=1, description="table rows per page; default and most: settings.max_page_size")] = None,
    after: Annotated[str | None, Query(max_length=64, description="the `next` of the previous page")] = None,
) -> Response:
    sweep = _owned_sweep(session, scope, sweep_id)
    return _sweep_response(session, sweep, _page_size(limit, settings), paging.after_seq(after))


@router.post("/{sweep_id}/cancel", status_code=202, response_model=Sweep, responses=NOT_FOUND, summary="Cancel a sweep")
def cancel_sweep(sweep_id: str, session: SessionDep, scope: ScopeDep, settings: SettingsDep) -> Response:
    """Queued jobs end cancelled at once; running ones stop within seconds; finished ones stay."""
    sweep = _owned_sweep(session, scope, sweep_id)
    sweeps_repo.request_cancel(session, sweep)
    session.refresh(sweep)
    return _sweep_response(session, sweep, settings.max_page_size, None, status_code=202)


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
    """The fits the SDK's `sweep.plot(x, y)` draws (analysis.fit_figure.chosen_fits: with y left out, one panel per
    y of that x), in the same drawing, titled with the preset's title in words for a preset's sweep, else the sweep's name."""
    sweep = _owned_sweep(session, scope, sweep_id)
    specs = _plotted_fits(sweep, x, y)
    rows = _succeeded_rows(session, sweep)
    fits = [result for spec in specs for result in fit_results(rows, spec)]
    title = figure_title(sweep.name, sweep.spec.get("tags", [])) or sweep.id
    image = render_fits(fits, title=title, x=specs[0].x, y=specs[0].y, fmt=format)
    return Response(image, media_type=MEDIA_TYPES[format])


def submit_sweep(
    spec: SweepSpec, session, owner: str, settings: Settings, broker: Broker, idempotency_key: str | None, public_url: str
) -> Response:
    """Shared by POST /v1/sweeps and POST /v1/presets/{name}: validate, count, store once, publish; or replay.
    `public_url` is the base of the Location header (service.api.deps.public_url)."""
    key = check_key(idempotency_key)
    _check_grid_size(spec, settings)
    base = _named_grid_error(lambda: sweep_base(with_sweep_tags(spec)))
    document = sweep_document(spec, base)
    request_hash, size = _fingerprint(document)
    if key is not None and (first := sweeps_repo.find_by_idempotency_key(session, owner, key)) is not None:
        return _replay(session, first, request_hash, key, settings, public_url)
    budget = _ByteBudget(settings.max_sweep_bytes)
    budget.add(size, "base", "the sweep's spec")
    jobs = _named_grid_error(lambda: list(_new_jobs(spec, base, request_hash, session, owner, settings, budget)))
    try:
        with quota.reserve(session, owner, len(jobs), settings):
            hold_uploads(session, owner, [job.spec for job in jobs])
            sweep, job_ids = sweeps_repo.create_sweep(
                session, owner=owner, spec=document, idempotency_key=key, request_hash=request_hash, jobs=jobs
            )
            session.commit()
    except (IntegrityError, ProblemError):
        session.rollback()
        first = sweeps_repo.find_by_idempotency_key(session, owner, key) if key is not None else None
        if first is None:
            raise
        return _replay(session, first, request_hash, key, settings, public_url)
    try:
        broker.enqueue_group(job_ids)
    except Exception as error:
        log.warning("sweep %s stored but not published yet (the reaper retries): %s", sweep.id, error)
    return _sweep_response(session, sweep, settings.max_page_size, None, status_code=202, headers=_accepted(sweep, settings, public_url))


def with_sweep_tags(spec: SweepSpec) -> dict:
    """The base spec with the sweep's tags added, so every job carries (and is filtered by) them."""
    tags = spec.base.get("tags", [])
    if not spec.tags or not isinstance(tags, list):
        return spec.base
    return {**spec.base, "tags": list(dict.fromkeys([*tags, *spec.tags]))}


def sweep_document(spec: SweepSpec, base: SweepBase) -> dict[str, Any]:
    """What the sweep row stores: the sweep as sent, with its base written out canonically."""
    sent = spec.model_dump(mode="json", exclude={"base"})
    return {field: base.document if field == "base" else sent[field] for field in SweepSpec.model_fields}


def _fingerprint(document: dict[str, Any]) -> tuple[str, int]:
    """The request hash of a sweep document (service/idempotency.py) and its size as compact JSON."""
    encoded = compact_json(document)
    return digest(encoded), len(encoded)


def _new_jobs(
    spec: SweepSpec, base: SweepBase, request_hash: str, session, owner: str, settings: Settings, budget: _ByteBudget
) -> Iterator[NewJob]:
    """One NewJob per grid point, made one at a time: uploads resolved, caps checked, its patch counted."""
    for point in grid_points(base, spec.grid):
        job_spec = resolve_uploads(point.spec, session, owner)
        parameters = _checked_caps(point, job_spec, settings)
        document = point_document(job_spec, base)
        patch = patch_between(base.document, document)
        budget.add(len(compact_json(patch)), "grid", f"grid point {point.values}")
        yield NewJob(document, patch, sweep_job_hash(request_hash, patch), parameters)


class _ByteBudget:
    """The bytes a sweep will store (compact JSON), refused with a 422 the moment they pass max_sweep_bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0

    def add(self, size: int, field: str, what: str) -> None:
        self.total += size
        if self.total > self.limit:
            message = (f"the sweep would store more than {self.limit} bytes of spec (its base once, then each "
                       f"job's patch): {self.total} by {what}; the cap is {self.limit} (setting max_sweep_bytes)")
            raise ProblemError(422, message, type=types.RESOURCE_CAP, title="Request exceeds a resource cap",
                               errors=[FieldError(field=field, message=message, limit=self.limit, value=self.total)])


def _check_grid_size(spec: SweepSpec, settings: Settings) -> None:
    size = grid_size(spec.grid)
    if size > settings.max_sweep_jobs:
        message = f"the grid has {size} points; the cap is {settings.max_sweep_jobs} (setting max_sweep_jobs)"
        raise ProblemError(422, message, type=types.RESOURCE_CAP, title="Request exceeds a resource cap",
                           errors=[FieldError(field="grid", message=message, limit=settings.max_sweep_jobs, value=size)])


def _named_grid_error(make):
    """make(), with a GridError turned into a 422 naming its field."""
    try:
        return make()
    except GridError as error:
        raise ProblemError(422, str(error), type=types.VALIDATION, title="Request failed validation",
                           errors=[FieldError(field=error.field, message=error.reason)]) from None


def _checked_caps(point: GridPoint, job_spec, settings: Settings) -> int:
    try:
        return check_spec_caps(job_spec, settings)
    except ProblemError as error:
        error.problem = error.problem.model_copy(update={"detail": f"grid point {point.values}: {error.problem.detail}"})
        raise


def _replay(session, first: models.Sweep, request_hash: str, key: str, settings: Settings, public_url: str) -> Response:
    if first.request_hash != request_hash:
        raise refuse_reuse(key, first.id)
    headers = _accepted(first, settings, public_url) | {"Idempotent-Replayed": "true"}
    return _sweep_response(session, first, settings.max_page_size, None, status_code=202, headers=headers)


def _accepted(sweep: models.Sweep, settings: Settings, public_url: str) -> dict[str, str]:
    return {"Location": f"{public_url}/v1/sweeps/{sweep.id}", "Retry-After": str(settings.retry_after_s)}


def _sweep_response(
    session, sweep: models.Sweep, limit: int, after_seq: int | None, *, status_code: int = 200, headers: dict | None = None
) -> Response:
    body = sweep_resource(session, sweep, limit, after_seq).model_dump_json()
    return Response(body, status_code=status_code, media_type="application/json", headers=headers)


def sweep_resource(session, sweep: models.Sweep, limit: int, after_seq: int | None) -> Sweep:
    """The sweep with counts, status and fits over all its jobs and one page of its table.

    The stored spec is validated as the SweepSpec it was stored from (the wire types it)."""
    counts = sweeps_repo.job_counts(session, sweep.id)
    page, has_more = sweeps_repo.table_page(session, sweep.id, limit, after_seq)
    return Sweep(
        **sweep_summary(sweep, counts).model_dump(exclude={"object", "axes"}),
        spec=sweep.spec,
        table=[{"job_id": row.job_id, "status": row.status, "values": row.values, "summary": row.summary,
                "warnings": row.warnings} for row in sweep_table.table(sweep.spec, page)],
        has_more=has_more,
        next=paging.next_cursor(page, has_more),
        fits=_fit_results(session, sweep),
    )


def sweep_summary(sweep: models.Sweep, counts: Counter) -> SweepSummary:
    """What GET /v1/sweeps shows of a sweep, from its row and its jobs' {status: count}."""
    return SweepSummary(
        id=sweep.id,
        name=sweep.name,
        tags=list(sweep.spec.get("tags", [])),
        status=sweep_table.derive_status(counts, sweep.cancel_requested),
        counts={status: counts[status] for status in models.JOB_STATUSES},
        total=sum(counts.values()),
        cancel_requested=sweep.cancel_requested,
        created_at=as_utc(sweep.created_at),
        axes=list(sweep.spec.get("grid", {})),
    )


def _fit_results(session, sweep: models.Sweep) -> list[FitResult]:
    """Every fit the sweep asked for, over all its succeeded jobs (read only when it asked for one)."""
    fits = [FitSpec(**fit) for fit in sweep.spec.get("fits", [])]
    rows = _succeeded_rows(session, sweep) if fits else []
    return [result for fit in fits for result in fit_results(rows, fit)]


def _succeeded_rows(session, sweep: models.Sweep) -> list[sweep_table.SweepRow]:
    return sweep_table.table(sweep.spec, sweeps_repo.succeeded_jobs(session, sweep.id))


def _page_size(limit: int | None, settings: Settings) -> int:
    return settings.max_page_size if limit is None else paging.checked_limit(limit, settings, "rows")


def _plotted_fits(sweep: models.Sweep, x: str | None, y: str | None) -> list[FitSpec]:
    """The sweep's fit specs `chosen_fits` picks; an (x, y) pair it asked no fit for is fitted here, ungrouped."""
    chosen = chosen_fits([FitSpec(**fit) for fit in sweep.spec.get("fits", [])], x=x, y=y)
    if chosen:
        return chosen
    if x is None or y is None:
        raise ProblemError(422, "the sweep asked for no fit of that kind: pass both x and y", type=types.VALIDATION,
                           errors=[FieldError(field="x" if x is None else "y", message="required: the sweep has no matching fit")])
    try:
        return [FitSpec(x=x, y=y)]
    except ValidationError:
        raise ProblemError(422, f"x = {x!r} is not a dotted spec path like model.hidden.0", type=types.VALIDATION,
                           errors=[FieldError(field="x", message="not a dotted spec path", value=x)]) from None


def _owned_sweep(session, scope: str | None, sweep_id: str) -> models.Sweep:
    sweep = sweeps_repo.get_sweep(session, scope, sweep_id)
    if sweep is None:
        raise ProblemError(404, "no such sweep")
    return sweep
