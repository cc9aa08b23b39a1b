"""The heartbeat thread's cancel grace on a migrated SQLite database: a job that keeps running
`cancel_grace_s` after its thread saw the cancel is handed to `overdue` once; one that stops in time never is.
(tests/integration/test_cancel_phases.py: the real overdue, which stores the job and kills its process.)"""

from __future__ import annotations

import time
import uuid

import pytest
from sqlalchemy import select

from ntklab.store import jobs_repo
from ntklab.store.db import make_engine, make_session_factory
from ntklab.store.job_store import JobStore
from ntklab.store.models import Job
from ntklab.workers.heartbeat import JobReporter
from ntklab.workers.tasks import abandon_process

GRACE_S, TICK_S = 0.6, 0.05


@pytest.fixture(scope="module")
def store(sqlite_stack: dict[str, str]) -> JobStore:
    return JobStore(make_session_factory(make_engine(sqlite_stack["NTKLAB_DATABASE_URL"])))


def running_job(store: JobStore):
    job_id = f"job_{uuid.uuid4().hex}"
    with store.sessions.begin() as session:
        session.add(Job(id=job_id, spec={}, spec_hash="0" * 64))
    return store.claim(job_id, worker="test@host", device="cpu")


def cancel(store: JobStore, job_id: str) -> None:
    with store.sessions() as session:
        jobs_repo.request_cancel(session, None, job_id)


def reporter(store: JobStore, claim, overdue: list[float]) -> JobReporter:
    return JobReporter(
        store,
        claim,
        heartbeat_interval_s=TICK_S,
        flush_interval_s=TICK_S,
        cancel_grace_s=GRACE_S,
        overdue=lambda: overdue.append(time.monotonic()),
    )


def seen(job: JobReporter, timeout_s: float = 5.0) -> float:
    deadline = time.monotonic() + timeout_s
    while not job.cancelled():
        assert time.monotonic() < deadline, "the cancel was not seen"
        time.sleep(0.01)
    return time.monotonic()


def test_a_job_running_past_the_grace_is_handed_to_overdue_once(store):
    claim, overdue = running_job(store), []
    with reporter(store, claim, overdue) as job:
        cancel(store, claim.job_id)
        seen_at = seen(job)
        time.sleep(GRACE_S + 10 * TICK_S)  # the engine does not stop
    assert len(overdue) == 1
    assert GRACE_S - TICK_S <= overdue[0] - seen_at <= GRACE_S + 4 * TICK_S


def test_a_job_that_stops_within_the_grace_is_not(store):
    claim, overdue = running_job(store), []
    with reporter(store, claim, overdue) as job:
        cancel(store, claim.job_id)
        seen(job)
        time.sleep(GRACE_S / 3)  # the engine reaches a checkpoint
    time.sleep(GRACE_S)
    assert overdue == []


def test_overdue_outside_a_pool_process_stores_the_cancel_and_kills_nothing(store):
    claim, overdue = running_job(store), []
    with reporter(store, claim, overdue) as job:
        cancel(store, claim.job_id)
        seen(job)
        job.metric("loss", 0, 1.0)
        abandon_process(store, claim, job)  # in pytest's own process: a solo pool's or a test's, not a prefork child
    with store.sessions() as session:
        row = session.execute(select(Job).where(Job.id == claim.job_id)).scalar_one()
        assert (row.status, row.progress_phase) == ("cancelled", "cancelled")
