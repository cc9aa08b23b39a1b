"""The API's queries on sweeps. A sweep's status, counts, table and fits are derived from its jobs
(analysis/sweep_table.py), not stored.

A sweep and all its jobs are written in one transaction; the jobs are then published as
one Celery group. Nothing about progress is stored on the sweep row itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from store import jobs_repo
from store.models import Job, Sweep, new_id, utcnow


@dataclass(frozen=True)
class NewJob:
    """One grid point's job: its full spec document, the hash of that document, its parameter count."""

    spec: dict
    spec_hash: str
    parameters: int


def create_sweep(session: Session, *, owner: str, spec: dict, jobs: list[NewJob]) -> tuple[Sweep, list[str]]:
    """Insert the sweep (its spec document) and one queued job per grid point (not committed);
    returns the job ids in grid order."""
    sweep = Sweep(id=new_id("swp"), owner=owner, name=spec.get("name"), spec=spec, created_at=utcnow())
    session.add(sweep)
    session.flush()
    job_ids = []
    for new in jobs:
        job = jobs_repo.create_job(
            session, owner=owner, spec=new.spec, spec_hash=new.spec_hash, parameters=new.parameters, idempotency_key=None
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
