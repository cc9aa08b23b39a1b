"""The reaper's statements (service/reaper.py): running jobs whose heartbeat went stale, queued jobs whose message
may be lost, each taken by an UPDATE conditional on what was read, so two reapers never take one job twice."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from ntklab.store.models import Job


def settle_dead_workers(
    session: Session, stale_before: dt.datetime, now: dt.datetime, max_attempts: int
) -> list[tuple[str, dt.datetime]]:
    """Every running job whose heartbeat is older than `stale_before`: cancelled if a cancel was asked, failed after
    `max_attempts`, else queued again. Returns (id, stale heartbeat) of those queued again (not committed)."""
    stale = session.execute(
        select(Job.id, Job.heartbeat_at, Job.cancel_requested, Job.attempts).where(
            Job.status == "running", Job.heartbeat_at < stale_before
        )
    ).all()
    requeued = []
    for job_id, heartbeat_at, cancel_requested, attempts in stale:
        if cancel_requested:
            values = {"status": "cancelled", "progress_phase": "cancelled", "finished_at": now}
        elif attempts >= max_attempts:
            error = {"type": "WorkerLost", "message": f"the worker died {attempts} times running this job; giving up"}
            values = {"status": "failed", "progress_phase": "failed", "finished_at": now, "error": error}
        else:
            values = {"status": "queued", "progress_phase": "queued", "enqueued_at": now, "worker": None}
        taken = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == "running", Job.heartbeat_at == heartbeat_at)
            .values(**values)
        ).rowcount
        if taken and values["status"] == "queued":
            requeued.append((job_id, heartbeat_at))
    return requeued


def long_queued(session: Session, stale_before: dt.datetime) -> list[tuple[str, dt.datetime | None]]:
    """(id, enqueued_at) of the jobs queued (or created, if never enqueued) before `stale_before`."""
    return [
        tuple(row)
        for row in session.execute(
            select(Job.id, Job.enqueued_at).where(
                Job.status == "queued",
                or_(Job.enqueued_at < stale_before, and_(Job.enqueued_at.is_(None), Job.created_at < stale_before)),
            )
        ).all()
    ]


def mark_enqueued(session: Session, waiting: list[tuple[str, dt.datetime | None]], now: dt.datetime) -> list[str]:
    """enqueued_at = now for each (id, enqueued_at) still queued with that enqueued_at; returns the ids taken (not committed)."""
    taken = []
    for job_id, enqueued_at in waiting:
        same = Job.enqueued_at.is_(None) if enqueued_at is None else Job.enqueued_at == enqueued_at
        if session.execute(
            update(Job).where(Job.id == job_id, Job.status == "queued", same).values(enqueued_at=now)
        ).rowcount:
            taken.append(job_id)
    return taken
