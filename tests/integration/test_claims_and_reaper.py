"""The SQL rules that make the worker safe, on PostgreSQL + Redis and on SQLite + filesystem broker.

A claim is conditional (queued → running, attempts + 1); every later write is conditional on
still owning the row; the reaper requeues a job whose heartbeat is stale exactly once and
republishes queued jobs the broker lost.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest
from sqlalchemy import func, select, update

from ntklab.config.settings import Settings
from ntklab.service.reaper import requeue_stale_jobs
from ntklab.store.db import make_engine, make_session_factory
from ntklab.store.job_store import ChunkRow, JobStore, LostJob
from ntklab.store.models import Artifact, Job, MetricChunk, utcnow
from ntklab.workers.celery_app import make_celery
from ntklab.workers.queue import Broker
from tests.stored_artifacts import add_artifact

SPEC = {"seed": 0, "model": {"hidden": [8]}, "training": {"max_steps": 3}}
LONG_AGO = dt.timedelta(hours=1)


@pytest.fixture(scope="module", params=["postgres+redis", "sqlite+filesystem"])
def stack(request: pytest.FixtureRequest) -> dict[str, str]:
    return request.getfixturevalue("postgres_redis_stack" if request.param == "postgres+redis" else "sqlite_stack")


@pytest.fixture(scope="module")
def settings(stack: dict[str, str]) -> Settings:
    return Settings(
        database_url=stack["NTKLAB_DATABASE_URL"],
        broker_url=stack["NTKLAB_BROKER_URL"],
        broker_dir=stack.get("NTKLAB_BROKER_DIR", "var/broker"),
        queue=stack["NTKLAB_QUEUE"],
        heartbeat_stale_s=30,
    )


@pytest.fixture(scope="module")
def sessions(settings: Settings):
    engine = make_engine(settings.database_url)
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture
def broker(settings: Settings) -> Broker:
    broker = Broker(make_celery(settings))
    with broker.celery.connection_for_write() as connection:
        connection.default_channel.queue_purge(broker.queue)
    return broker


def new_job(sessions, **columns) -> str:
    job_id = f"job_{uuid.uuid4().hex}"
    with sessions.begin() as session:
        session.add(Job(id=job_id, spec=SPEC, spec_hash="0" * 64, **columns))
    return job_id


def row(sessions, job_id: str) -> dict:
    with sessions() as session:
        job = session.execute(select(Job).where(Job.id == job_id)).scalar_one()
        return {c.key: getattr(job, c.key) for c in Job.__table__.columns}


def count(sessions, model, job_id: str) -> int:
    with sessions() as session:
        return session.execute(select(func.count()).select_from(model).where(model.job_id == job_id)).scalar()


def test_a_job_is_claimed_once(sessions):
    store = JobStore(sessions)
    job_id = new_job(sessions)
    claim = store.claim(job_id, worker="a@host", device="cpu")
    held = row(sessions, job_id)
    assert claim is not None and claim.attempt == 1 and claim.spec == SPEC
    assert held["status"] == "running" and held["worker"] == "a@host" and held["heartbeat_at"] is not None
    assert store.claim(job_id, worker="b@host", device="cpu") is None
    assert row(sessions, job_id) == held


def test_a_duplicate_delivery_does_not_touch_a_held_row(sessions):
    """Worker A claimed the job, was presumed dead, B claimed it again: A can no longer write."""
    store = JobStore(sessions)
    job_id = new_job(sessions)
    first = store.claim(job_id, worker="a@host", device="cpu")
    with sessions.begin() as session:
        session.execute(update(Job).where(Job.id == job_id).values(status="queued"))
    second = store.claim(job_id, worker="b@host", device="cpu")
    assert second.attempt == 2
    store.report(second, {"progress_step": 5}, [ChunkRow("loss", 0, [0, 1], [1.0, 0.5])])
    held = row(sessions, job_id)

    with pytest.raises(LostJob):
        store.report(first, {"progress_step": 99}, [ChunkRow("loss", 1, [2], [0.1])])
    with pytest.raises(LostJob):
        store.finish(
            first, "succeeded", summary={"steps": 3}, artifacts={"kernel_init.npy": ("application/x-npy", b"x")}
        )
    assert store.claim(job_id, worker="c@host", device="cpu") is None
    assert row(sessions, job_id) == held
    assert count(sessions, MetricChunk, job_id) == 1 and count(sessions, Artifact, job_id) == 0


def test_a_new_attempt_starts_from_empty_series_and_artifacts(sessions):
    store = JobStore(sessions)
    job_id = new_job(sessions)
    first = store.claim(job_id, worker="a@host", device="cpu")
    store.report(first, None, [ChunkRow("loss", 0, [0, 1, 2], [3.0, 2.0, 1.0])])
    with sessions.begin() as session:
        add_artifact(session, job_id, "kernel_init.npy", "application/x-npy", b"x")
        session.execute(update(Job).where(Job.id == job_id).values(status="queued"))
    assert store.claim(job_id, worker="b@host", device="cpu").attempt == 2
    assert count(sessions, MetricChunk, job_id) == 0 and count(sessions, Artifact, job_id) == 0


def test_report_returns_the_cancel_flag(sessions):
    store = JobStore(sessions)
    job_id = new_job(sessions)
    claim = store.claim(job_id, worker="a@host", device="cpu")
    assert store.report(claim, None, []) is False
    with sessions.begin() as session:
        session.execute(update(Job).where(Job.id == job_id).values(cancel_requested=True))
    assert store.report(claim, None, []) is True


def test_a_queued_job_with_cancel_requested_is_not_run_but_cancelled(sessions):
    job_id = new_job(sessions, cancel_requested=True)
    assert JobStore(sessions).claim(job_id, worker="a@host", device="cpu") is None
    assert row(sessions, job_id)["status"] == "cancelled"


def test_the_reaper_requeues_a_stale_job_exactly_once_even_with_two_reapers(sessions, settings, broker):
    job_id = new_job(sessions, status="running", attempts=1, worker="dead@host", heartbeat_at=utcnow() - LONG_AGO)
    fresh_id = new_job(sessions, status="running", attempts=1, worker="alive@host", heartbeat_at=utcnow())
    results, barrier = [], threading.Barrier(2)

    def reap():
        with sessions() as session:
            barrier.wait()
            results.append(requeue_stale_jobs(session, settings, broker))

    reapers = [threading.Thread(target=reap) for _ in range(2)]
    for reaper in reapers:
        reaper.start()
    for reaper in reapers:
        reaper.join()
    assert sorted(map(len, results)) == [0, 1] and results[0] + results[1] == [job_id]
    requeued = row(sessions, job_id)
    assert requeued["status"] == "queued" and requeued["attempts"] == 1 and requeued["worker"] is None
    assert row(sessions, fresh_id)["status"] == "running"
    assert broker.depth() == 1


def test_the_reaper_finishes_stale_jobs_that_were_cancelled_or_failed_too_often(sessions, settings, broker):
    stale = utcnow() - LONG_AGO
    cancelled = new_job(sessions, status="running", attempts=1, heartbeat_at=stale, cancel_requested=True)
    exhausted = new_job(sessions, status="running", attempts=settings.max_attempts, heartbeat_at=stale)
    with sessions() as session:
        assert requeue_stale_jobs(session, settings, broker) == []
    assert row(sessions, cancelled)["status"] == "cancelled"
    failed = row(sessions, exhausted)
    assert failed["status"] == "failed" and "died" in failed["error"]["message"]
    assert broker.depth() == 0


def test_the_reaper_republishes_queued_jobs_the_broker_lost(sessions, settings, broker):
    with sessions.begin() as session:
        session.execute(update(Job).where(Job.status == "queued").values(status="cancelled"))
    lost = new_job(sessions, status="queued", enqueued_at=utcnow() - LONG_AGO)
    recent = new_job(sessions, status="queued", enqueued_at=utcnow())
    with sessions() as session:
        assert requeue_stale_jobs(session, settings, broker) == [lost]
    assert broker.depth() == 1
    with sessions() as session:
        assert requeue_stale_jobs(session, settings, broker) == []
    assert row(sessions, recent)["enqueued_at"] is not None and broker.depth() == 1
