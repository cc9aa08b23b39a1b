"""The API's queries on sweeps. A sweep's status, counts, table and fits are derived from its jobs.

A sweep and all its jobs are written in one transaction; the jobs are then published as
one Celery group. Nothing about progress is stored on the sweep row itself.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from api_schemas.sweeps import SweepSpec
from service import jobs_repo
from service.grid import GridPoint
from service.idempotency import spec_hash
from service.models import Job, Sweep, new_id, utcnow
from service.sweep_analysis import SweepRow, get_path


def create_sweep(
    session: Session, *, owner: str, spec: SweepSpec, points: list[GridPoint], parameters: list[int]
) -> tuple[Sweep, list[str]]:
    """Insert the sweep and one queued job per grid point (not committed); returns the job ids in grid order."""
    sweep = Sweep(id=new_id("swp"), owner=owner, name=spec.name, spec=spec.model_dump(mode="json"), created_at=utcnow())
    session.add(sweep)
    session.flush()
    job_ids = []
    for point, count in zip(points, parameters):
        document = point.spec.model_dump(mode="json")
        job = jobs_repo.create_job(
            session, owner=owner, spec=document, spec_hash=spec_hash(document), parameters=count, idempotency_key=None
        )
        job.sweep_id = sweep.id
        job_ids.append(job.id)
    return sweep, job_ids


def get_sweep(session: Session, scope: str | None, sweep_id: str) -> Sweep | None:
    """The sweep if `scope` may see it (scope None: the admin key, which sees all)."""
    mine = () if scope is None else (Sweep.owner == scope,)
    return session.scalar(select(Sweep).where(*mine, Sweep.id == sweep_id))


def sweep_jobs(session: Session, sweep_id: str) -> list[Job]:
    return list(session.scalars(select(Job).where(Job.sweep_id == sweep_id).order_by(Job.seq)))


def table_paths(spec: dict) -> list[str]:
    """The dotted paths a row shows: the grid's (linked axes "a,b" split) and every fit's x and group_by,
    so a fit's axis is in the table even when a linked axis set it (e.g. x = model.hidden.0 of model.hidden)."""
    grid = [path for axis in spec.get("grid", {}) for path in axis.split(",")]
    fits = [path for fit in spec.get("fits", []) for path in (fit["x"], *fit.get("group_by", []))]
    return list(dict.fromkeys(grid + fits))


def table(sweep: Sweep, jobs: list[Job]) -> list[SweepRow]:
    paths = table_paths(sweep.spec)
    return [
        SweepRow(job.id, job.status, {path: get_path(job.spec, path) for path in paths}, job.spec, job.summary or {})
        for job in jobs
    ]


def derive_status(counts: Counter, cancel_requested: bool) -> str:
    """queued/running while any job is active; then succeeded, cancelled, failed or partial."""
    total = sum(counts.values())
    if counts["running"] or (counts["queued"] and counts["queued"] < total):
        return "running"
    if counts["queued"]:
        return "queued"
    if counts["succeeded"] == total:
        return "succeeded"
    if cancel_requested or counts["cancelled"] == total:
        return "cancelled"
    return "partial" if counts["succeeded"] else "failed"


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
