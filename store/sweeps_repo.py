"""The API's queries on sweeps. A sweep's status, counts, table and fits are derived from its jobs
(analysis/sweep_table.py), not stored.

A sweep and all its jobs are written in one transaction; the jobs are then published as
one Celery group. Nothing about progress is stored on the sweep row itself. The sweep row
holds the base spec once; each job row holds its patch (store/sweep_specs.py). Reads stay
bounded whatever the sweep: counts are one GROUP BY, the table is read a page at a time,
and the fits read only the succeeded jobs' patches and summaries.

The list of sweeps is paged newest first by `Sweep.seq` as jobs are by `Job.seq`; a page's
counts are one GROUP BY over its sweeps' jobs. Filtering by status filters on the status
derived from those counts, written as an SQL expression (`derived_status`) that follows
ntklab.analysis.sweep_table.derive_status case by case.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, func, or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from ntklab.store import jobs_repo
from ntklab.store.models import JOB_STATUSES, Job, Sweep, SweepTag, new_id, utcnow
from ntklab.store.sweep_specs import job_spec


@dataclass(frozen=True)
class NewJob:
    """One grid point's job: its full spec document (for its name, tags and steps), the patch
    stored for it, the hash of the two, its parameter count and its estimate's document (store/job_estimates.py)."""

    spec: dict
    spec_patch: dict
    spec_hash: str
    parameters: int
    estimate: dict | None = None


@dataclass(frozen=True)
class SweepJob:
    """A job as the sweep table reads it: its full spec materialised, its summary scalars, its warnings."""

    id: str
    seq: int
    status: str
    spec: dict[str, Any]
    summary: dict[str, Any] | None
    warnings: list[dict[str, Any]] | None


def create_sweep(
    session: Session, *, owner: str, spec: dict, idempotency_key: str | None, request_hash: str, jobs: list[NewJob]
) -> tuple[Sweep, list[str]]:
    """Insert the sweep (its spec document, base included, once) and one queued job per grid point
    (not committed); returns the job ids in grid order."""
    sweep = Sweep(
        id=new_id("swp"),
        owner=owner,
        name=spec.get("name"),
        spec=spec,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        created_at=utcnow(),
    )
    session.add(sweep)
    session.add_all(SweepTag(sweep_id=sweep.id, tag=tag) for tag in dict.fromkeys(spec.get("tags", ())))
    session.flush()
    rows = [
        jobs_repo.create_job(
            session,
            owner=owner,
            spec=new.spec,
            spec_hash=new.spec_hash,
            parameters=new.parameters,
            estimate=new.estimate,
            idempotency_key=None,
            sweep_id=sweep.id,
            spec_patch=new.spec_patch,
        )
        for new in jobs
    ]
    session.flush()
    largest_first(rows)
    return sweep, [job.id for job in rows]


def largest_first(rows: list[Job]) -> None:
    """Give the sweep's jobs its own seqs again as `run_order`, the most parameters first (ties in grid
    order): workers take them in that order (store/fairness.py), while the table stays in grid order."""
    seqs = sorted(job.seq for job in rows)
    for run_order, job in zip(seqs, sorted(rows, key=lambda job: (-job.parameters, job.seq))):
        job.run_order = run_order


def find_by_idempotency_key(session: Session, owner: str, key: str) -> Sweep | None:
    return session.scalar(select(Sweep).where(Sweep.owner == owner, Sweep.idempotency_key == key))


def get_sweep(session: Session, scope: str | None, sweep_id: str) -> Sweep | None:
    """The sweep if `scope` may see it (scope None: the admin key, which sees all)."""
    mine = () if scope is None else (Sweep.owner == scope,)
    return session.scalar(select(Sweep).where(*mine, Sweep.id == sweep_id))


@dataclass(frozen=True)
class SweepFilter:
    statuses: tuple[str, ...] = ()
    tag: str | None = None


def list_page(
    session: Session, scope: str | None, where: SweepFilter, limit: int, before_seq: int | None
) -> tuple[list[Sweep], bool]:
    """Up to `limit` sweeps `scope` may see (None: all), newest first, below `before_seq`, and whether more follow."""
    query = select(Sweep).where(*(() if scope is None else (Sweep.owner == scope,)))
    if where.tag is not None:
        query = query.where(
            select(SweepTag.sweep_id).where(SweepTag.sweep_id == Sweep.id, SweepTag.tag == where.tag).exists()
        )
    if where.statuses:
        counts = _counts_by_sweep(scope).subquery()
        query = query.outerjoin(counts, counts.c.sweep_id == Sweep.id).where(
            derived_status(
                {name: func.coalesce(counts.c[name], 0) for name in (*JOB_STATUSES, "total")}, Sweep.cancel_requested
            ).in_(where.statuses)
        )
    if before_seq is not None:
        query = query.where(Sweep.seq < before_seq)
    sweeps = list(session.scalars(query.order_by(Sweep.seq.desc()).limit(limit + 1)))
    return sweeps[:limit], len(sweeps) > limit


def counts_of(session: Session, sweep_ids: list[str]) -> dict[str, Counter]:
    """{sweep id: {status: jobs}} for these sweeps, in one GROUP BY."""
    counts: dict[str, Counter] = {sweep_id: Counter() for sweep_id in sweep_ids}
    if sweep_ids:
        rows = session.execute(
            select(Job.sweep_id, Job.status, func.count())
            .where(Job.sweep_id.in_(sweep_ids))
            .group_by(Job.sweep_id, Job.status)
        )
        for sweep_id, status, count in rows:
            counts[sweep_id][status] = count
    return counts


def _counts_by_sweep(scope: str | None):
    """sweep_id, one count column per job status, and total, over the sweep jobs `scope` may see (a sweep's
    jobs are its owner's); a sweep without jobs has no row."""
    per_status = [func.sum(case((Job.status == status, 1), else_=0)).label(status) for status in JOB_STATUSES]
    return (
        select(Job.sweep_id, *per_status, func.count().label("total"))
        .where(*jobs_repo.visible(scope), Job.sweep_id.is_not(None))
        .group_by(Job.sweep_id)
    )


def derived_status(counts: dict[str, ColumnElement], cancel_requested: ColumnElement) -> ColumnElement:
    """ntklab.analysis.sweep_table.derive_status as an SQL CASE over per-status job counts and their `total`."""
    queued, running, succeeded, cancelled, total = (
        counts[name] for name in ("queued", "running", "succeeded", "cancelled", "total")
    )
    return case(
        (or_(running > 0, and_(queued > 0, queued < total)), "running"),
        (queued > 0, "queued"),
        (and_(total > 0, succeeded == total), "succeeded"),
        (or_(cancel_requested, cancelled == total), "cancelled"),
        (succeeded > 0, "partial"),
        else_="failed",
    )


def job_counts(session: Session, sweep_id: str) -> Counter:
    """{status: jobs} over all the sweep's jobs."""
    rows = session.execute(select(Job.status, func.count()).where(Job.sweep_id == sweep_id).group_by(Job.status))
    return Counter(dict(rows.all()))


def table_page(session: Session, sweep_id: str, limit: int, after_seq: int | None) -> tuple[list[SweepJob], bool]:
    """Up to `limit` of the sweep's jobs in grid order (seq ascending) after `after_seq`, and whether more follow."""
    query = select(Job).where(Job.sweep_id == sweep_id)
    if after_seq is not None:
        query = query.where(Job.seq > after_seq)
    jobs = [_read(job) for job in session.scalars(query.order_by(Job.seq).limit(limit + 1))]
    return jobs[:limit], len(jobs) > limit


def succeeded_jobs(session: Session, sweep_id: str) -> list[SweepJob]:
    """The sweep's succeeded jobs in grid order: what its fits are made of."""
    query = select(Job).where(Job.sweep_id == sweep_id, Job.status == "succeeded").order_by(Job.seq)
    return [_read(job) for job in session.scalars(query)]


def _read(job: Job) -> SweepJob:
    return SweepJob(job.id, job.seq, job.status, job_spec(job), job.summary, job.warnings)


def active_jobs_using(session: Session, owner: str, spec_path: tuple[str, str], upload_id: str) -> list[str]:
    """Ids of the owner's queued or running sweep jobs whose spec names `upload_id` at `spec_path`
    (("data", "id") or ("model", "id")): each is materialised from its sweep's base, which is read
    once per sweep; there are at most max_queued_jobs_per_key of them."""
    section, field = spec_path
    query = (
        select(Job)
        .where(Job.owner == owner, Job.status.in_(jobs_repo.ACTIVE_STATUSES), Job.spec_patch.is_not(None))
        .order_by(Job.seq)
    )
    return [job.id for job in session.scalars(query) if (job_spec(job).get(section) or {}).get(field) == upload_id]


def request_cancel(session: Session, sweep: Sweep) -> None:
    """Cancel every unfinished job: queued ones at once, running ones at their next step."""
    now = utcnow()
    session.execute(update(Sweep).where(Sweep.id == sweep.id).values(cancel_requested=True))
    session.execute(
        update(Job)
        .where(Job.sweep_id == sweep.id, Job.status == "queued")
        .values(status="cancelled", cancel_requested=True, progress_phase="cancelled", finished_at=now)
    )
    session.execute(update(Job).where(Job.sweep_id == sweep.id, Job.status == "running").values(cancel_requested=True))
    session.commit()
