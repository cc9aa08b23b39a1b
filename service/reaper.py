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

from sqlalchemy.orm import Session, sessionmaker

from ntklab.config.settings import Settings
from ntklab.store import stale_jobs
from ntklab.store.models import utcnow
from ntklab.workers.queue import Broker

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


def _requeue_dead_workers(
    session: Session, stale_before: dt.datetime, now: dt.datetime, max_attempts: int
) -> list[str]:
    requeued = stale_jobs.settle_dead_workers(session, stale_before, now, max_attempts)
    for job_id, heartbeat_at in requeued:
        log.warning("job %s: heartbeat stale since %s, requeued", job_id, heartbeat_at)
    return [job_id for job_id, _ in requeued]


def _lost_messages(session: Session, stale_before: dt.datetime, now: dt.datetime, broker: Broker) -> list[str]:
    """The long-queued jobs, marked enqueued again, when the broker holds fewer messages than there are of them."""
    waiting = stale_jobs.long_queued(session, stale_before)
    if not waiting:
        return []
    depth = broker.depth()
    if depth is None or depth >= len(waiting):
        return []
    return stale_jobs.mark_enqueued(session, waiting, now)


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
