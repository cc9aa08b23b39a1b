"""Give lost jobs back to the queue.

A worker proves it is alive by moving `jobs.heartbeat_at` forward every
`heartbeat_interval_s`. A `running` job whose heartbeat is older than `heartbeat_stale_s`
lost its worker (SIGKILL, OOM killer, power cut): it goes back to `queued` and is
published again, or to `cancelled` if a cancel was asked meanwhile. The UPDATE is
conditional on the stale heartbeat it read, so two reapers never requeue one job twice.
Heartbeats missed while the database was down are the outage's, not the worker's: the
loop judges heartbeats only once it has reached the database for `heartbeat_stale_s` in
a row (a live worker has written one by then), so a database restart requeues nothing.

A `queued` job whose message the broker lost (Redis restarted without persistence) would
wait forever: when the broker holds fewer messages than there are jobs queued for longer
than `heartbeat_stale_s`, those jobs are published again. Extra messages are harmless:
the worker's claim (`queued → running`) is conditional, so a duplicate exits at once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import time

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from store.models import Job, utcnow
from workers.queue import Broker

log = logging.getLogger(__name__)


def requeue_stale_jobs(
    session: Session, settings: Settings, broker: Broker, *, database_up_for_s: float = math.inf
) -> list[str]:
    """Requeue jobs whose worker died and republish queued jobs the broker lost; returns their ids.

    Running jobs are judged only when the database has been reachable for `database_up_for_s`
    ≥ `heartbeat_stale_s`; before that a stale heartbeat may just be a write the outage refused.
    """
    now = utcnow()
    stale_before = now - dt.timedelta(seconds=settings.heartbeat_stale_s)
    judge = database_up_for_s >= settings.heartbeat_stale_s
    dead = _requeue_dead_workers(session, stale_before, now, settings.max_attempts) if judge else []
    requeued = dead + _lost_messages(session, stale_before, now, broker)
    session.commit()
    published = []
    for job_id in requeued:
        try:
            broker.enqueue(job_id)
            published.append(job_id)
        except Exception as error:
            log.warning("could not publish %s (retried on the next pass): %s", job_id, error)
    return published


def _requeue_dead_workers(session: Session, stale_before: dt.datetime, now: dt.datetime, max_attempts: int) -> list[str]:
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
            log.warning("job %s: heartbeat stale since %s, requeued", job_id, heartbeat_at)
            requeued.append(job_id)
    return requeued


def _lost_messages(session: Session, stale_before: dt.datetime, now: dt.datetime, broker: Broker) -> list[str]:
    waiting = session.execute(
        select(Job.id, Job.enqueued_at).where(
            Job.status == "queued",
            or_(Job.enqueued_at < stale_before, and_(Job.enqueued_at.is_(None), Job.created_at < stale_before)),
        )
    ).all()
    if not waiting:
        return []
    depth = broker.depth()
    if depth is None or depth >= len(waiting):
        return []
    republished = []
    for job_id, enqueued_at in waiting:
        taken = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == "queued", _same(Job.enqueued_at, enqueued_at))
            .values(enqueued_at=now)
        ).rowcount
        if taken:
            republished.append(job_id)
    return republished


def _same(column, value):
    return column.is_(None) if value is None else column == value


async def reaper_loop(settings: Settings, sessions: sessionmaker[Session], broker: Broker) -> None:
    """Run `requeue_stale_jobs` every `reaper_interval_s` until cancelled; errors are logged, not fatal.

    `sessions` and `broker` are the API process's own (app.state), not a second set."""
    reached_since: float | None = None
    while True:
        try:
            started = time.monotonic()
            up_for = 0.0 if reached_since is None else started - reached_since
            await asyncio.to_thread(_reap_once, sessions, settings, broker, up_for)
            reached_since = reached_since or started
        except Exception as error:
            reached_since = None
            log.warning("reaper pass failed: %s", error)
        await asyncio.sleep(settings.reaper_interval_s)


def _reap_once(sessions, settings: Settings, broker: Broker, database_up_for_s: float) -> list[str]:
    with sessions() as session:
        return requeue_stale_jobs(session, settings, broker, database_up_for_s=database_up_for_s)
