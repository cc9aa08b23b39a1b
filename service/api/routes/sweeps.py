"""/v1/sweeps: a grid of jobs over dotted spec paths, its table, its power-law fits and their plot.

Submitting (POST /v1/sweeps) is service/submission.py:submit_sweep: the base stored once, the grid's points
checked and stored as patches in one transaction, published as a group; an `Idempotency-Key` answers the
sweep it made (`Idempotent-Replayed: true`) for the same body and a 422 for another. Reading: counts, status
and fits cover all the sweep's jobs; the table is paged in grid order (`limit`, `after`); the resource is
shaped by service/api/resources.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query, Response
from pydantic import ValidationError

from ntklab.analysis.figure_titles import figure_title
from ntklab.analysis.fit_figure import chosen_fits
from ntklab.analysis.sweep_plot import MEDIA_TYPES, render_fits
from ntklab.analysis.sweep_table import fit_results
from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import FieldError
from ntklab.api_schemas.sweeps import FitSpec, Sweep, SweepPage, SweepSpec, SweepStatus
from ntklab.config.settings import Settings
from ntklab.service import submission
from ntklab.service.api import paging
from ntklab.service.api.deps import BrokerDep, OwnerDep, PublicUrlDep, ScopeDep, SessionDep, SettingsDep
from ntklab.service.api.resources import submitted_sweep, succeeded_rows, sweep_response, sweep_summary
from ntklab.service.api.routes import IDEMPOTENCY_KEY, PROBLEM, SUBMIT_PROBLEMS, StrictJSONRoute
from ntklab.service.problems import ProblemError
from ntklab.store import models, sweeps_repo

NOT_FOUND = {404: {**PROBLEM, "description": "no such sweep (or not yours)"}}
SWEEP_EXAMPLES = {
    "fig1": {
        "summary": "ΔK vs width for a linear and a swish head, two seeds",
        "value": {
            "name": "fig1-mini",
            "base": {"model": {"hidden": [100], "activation": "tanh"}, "training": {"max_steps": 500}},
            "grid": {
                "model.hidden.0": [100, 300, 1000],
                "model.output_activation": ["identity", "swish"],
                "seed": [0, 1],
            },
            "fits": [{"y": "delta_k_max", "x": "model.hidden.0", "group_by": ["model.output_activation"]}],
        },
    }
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
    submitted = submission.submit_sweep(spec, idempotency_key, session, owner, settings, broker)
    return submitted_sweep(session, submitted, settings, public_url)


@router.get("", response_model=SweepPage, summary="List sweeps, newest first")
def list_sweeps(
    session: SessionDep,
    scope: ScopeDep,
    settings: SettingsDep,
    status: Annotated[
        list[SweepStatus] | None, Query(description="the sweep's derived status; repeat to match several")
    ] = None,
    tag: Annotated[str | None, Query(max_length=64, description="a tag of the sweep itself")] = None,
    limit: Annotated[
        int, Query(ge=1, description="page size, at most settings.max_page_size")
    ] = paging.DEFAULT_PAGE_SIZE,
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
    limit: Annotated[
        int | None, Query(ge=1, description="table rows per page; default and most: settings.max_page_size")
    ] = None,
    after: Annotated[str | None, Query(max_length=64, description="the `next` of the previous page")] = None,
) -> Response:
    sweep = _owned_sweep(session, scope, sweep_id)
    return sweep_response(session, sweep, _page_size(limit, settings), paging.after_seq(after))


@router.post("/{sweep_id}/cancel", status_code=202, response_model=Sweep, responses=NOT_FOUND, summary="Cancel a sweep")
def cancel_sweep(sweep_id: str, session: SessionDep, scope: ScopeDep, settings: SettingsDep) -> Response:
    """Queued jobs end cancelled at once; running ones stop within seconds; finished ones stay."""
    sweep = _owned_sweep(session, scope, sweep_id)
    sweeps_repo.request_cancel(session, sweep)
    session.refresh(sweep)
    return sweep_response(session, sweep, settings.max_page_size, None, status_code=202)


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
    """The fits the SDK's `sweep.plot(x, y)` draws (ntklab.analysis.fit_figure.chosen_fits: with y left out, one panel per
    y of that x), in the same drawing, titled with the preset's title in words for a preset's sweep, else the sweep's name."""
    sweep = _owned_sweep(session, scope, sweep_id)
    specs = _plotted_fits(sweep, x, y)
    rows = succeeded_rows(session, sweep)
    fits = [result for spec in specs for result in fit_results(rows, spec)]
    title = figure_title(sweep.name, sweep.spec.get("tags", [])) or sweep.id
    image = render_fits(fits, title=title, x=specs[0].x, y=specs[0].y, fmt=format)
    return Response(image, media_type=MEDIA_TYPES[format])


def _page_size(limit: int | None, settings: Settings) -> int:
    return settings.max_page_size if limit is None else paging.checked_limit(limit, settings, "rows")


def _plotted_fits(sweep: models.Sweep, x: str | None, y: str | None) -> list[FitSpec]:
    """The sweep's fit specs `chosen_fits` picks; an (x, y) pair it asked no fit for is fitted here, ungrouped."""
    chosen = chosen_fits([FitSpec(**fit) for fit in sweep.spec.get("fits", [])], x=x, y=y)
    if chosen:
        return chosen
    if x is None or y is None:
        raise ProblemError(
            422,
            "the sweep asked for no fit of that kind: pass both x and y",
            type=types.VALIDATION,
            errors=[FieldError(field="x" if x is None else "y", message="required: the sweep has no matching fit")],
        )
    try:
        return [FitSpec(x=x, y=y)]
    except ValidationError:
        raise ProblemError(
            422,
            f"x = {x!r} is not a dotted spec path like model.hidden.0",
            type=types.VALIDATION,
            errors=[FieldError(field="x", message="not a dotted spec path", value=x)],
        ) from None


def _owned_sweep(session, scope: str | None, sweep_id: str) -> models.Sweep:
    sweep = sweeps_repo.get_sweep(session, scope, sweep_id)
    if sweep is None:
        raise ProblemError(404, "no such sweep")
    return sweep
