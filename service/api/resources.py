"""Stored rows as more than one router shows them: times in UTC, and a sweep with its counts, table and fits.

A sweep resource is encoded by pydantic-core in one pass, its stored spec included as it is, since a base of a
million inline numbers would otherwise be validated and encoded again on every poll. Counts, status and fits
cover all the sweep's jobs; the table is paged in grid order (`limit`, `after`).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

from fastapi import Response

from ntklab.analysis import sweep_table
from ntklab.analysis.sweep_table import fit_results
from ntklab.api_schemas.sweeps import FitResult, FitSpec, Sweep, SweepSpec, SweepSummary
from ntklab.config.settings import Settings
from ntklab.service.api import paging
from ntklab.service.submission import Submitted
from ntklab.store import models, sweeps_repo


def as_utc(moment: dt.datetime | None) -> dt.datetime | None:
    """Times are stored in UTC; SQLite hands them back without a zone, PostgreSQL with one."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=dt.UTC)


def submitted_sweep(session, submitted: Submitted[models.Sweep], settings: Settings, public_url: str) -> Response:
    """The 202 of POST /v1/sweeps and POST /v1/presets/{name}: the sweep, where to poll it, and whether it is a replay.
    `public_url` is the base of the Location header (ntklab.service.api.deps.public_url)."""
    sweep = submitted.row
    headers = {"Location": f"{public_url}/v1/sweeps/{sweep.id}", "Retry-After": str(settings.retry_after_s)}
    if submitted.replayed:
        headers["Idempotent-Replayed"] = "true"
    return sweep_response(session, sweep, settings.max_page_size, None, status_code=202, headers=headers)


def sweep_response(
    session,
    sweep: models.Sweep,
    limit: int,
    after_seq: int | None,
    *,
    status_code: int = 200,
    headers: dict | None = None,
) -> Response:
    body = sweep_resource(session, sweep, limit, after_seq).model_dump_json()
    return Response(body, status_code=status_code, media_type="application/json", headers=headers)


def sweep_resource(session, sweep: models.Sweep, limit: int, after_seq: int | None) -> Sweep:
    """The sweep with counts, status and fits over all its jobs and one page of its table.

    The stored spec is typed as the SweepSpec it was stored from (its base as stored: `stored_sweep_spec`)."""
    counts = sweeps_repo.job_counts(session, sweep.id)
    page, has_more = sweeps_repo.table_page(session, sweep.id, limit, after_seq)
    return Sweep(
        **sweep_summary(sweep, counts).model_dump(exclude={"object", "axes"}),
        spec=stored_sweep_spec(sweep.spec),
        table=[
            {
                "job_id": row.job_id,
                "status": row.status,
                "values": row.values,
                "summary": row.summary,
                "warnings": row.warnings,
            }
            for row in sweep_table.table(sweep.spec, page)
        ],
        has_more=has_more,
        next=paging.next_cursor(page, has_more),
        fits=_fit_results(session, sweep),
    )


def stored_sweep_spec(document: dict) -> SweepSpec:
    """A stored sweep document as its wire type. Its base was validated when the sweep was submitted and may hold
    megabytes of inline data: it is put back as stored instead of being validated again on every read."""
    return SweepSpec.model_validate({**document, "base": {}}).model_copy(update={"base": document.get("base", {})})


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


def succeeded_rows(session, sweep: models.Sweep) -> list[sweep_table.SweepRow]:
    """The sweep's succeeded jobs as table rows, over all its jobs (what its fits and plot read)."""
    return sweep_table.table(sweep.spec, sweeps_repo.succeeded_jobs(session, sweep.id))


def _fit_results(session, sweep: models.Sweep) -> list[FitResult]:
    """Every fit the sweep asked for, over all its succeeded jobs (read only when it asked for one)."""
    fits = [FitSpec(**fit) for fit in sweep.spec.get("fits", [])]
    rows = succeeded_rows(session, sweep) if fits else []
    return [result for fit in fits for result in fit_results(rows, fit)]
