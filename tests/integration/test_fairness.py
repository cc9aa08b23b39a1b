"""Fair claims across owners (store/fairness.py) on PostgreSQL and on SQLite.

A worker simulated in-process claims with `JobStore.claim_next` and finishes each job at
once; the order of claims is then checked against the rule: fewest running first, then the
owner whose last job started longest ago, then each owner's oldest job.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest
from sqlalchemy import delete, select, update

from ntklab.store import sweeps_repo
from ntklab.store.db import make_engine, make_session_factory
from ntklab.store.job_store import JobStore
from ntklab.store.models import Job, utcnow
from ntklab.store.sweeps_repo import NewJob

SPEC = {"seed": 0, "model": {"hidden": [8]}, "training": {"max_steps": 3}}


@pytest.fixture(scope="module", params=["postgresql", "sqlite"])
def sessions(request: pytest.FixtureRequest):
    url = (
        request.getfixturevalue("postgres_url")
        if request.param == "postgresql"
        else request.getfixturevalue("sqlite_stack")["NTKLAB_DATABASE_URL"]
    )
    engine = make_engine(url)
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture
def store(sessions) -> JobStore:
    with sessions.begin() as session:
        session.execute(delete(Job))
    return JobStore(sessions)


def queue_jobs(sessions, owner: str, count: int, **columns) -> list[str]:
    batch = uuid.uuid4().hex[:8]
    ids = [f"job_{owner}_{batch}_{index:02d}" for index in range(count)]
    with sessions.begin() as session:
        session.add_all(Job(id=job_id, owner=owner, spec=SPEC, spec_hash="0" * 64, **columns) for job_id in ids)
    return ids


def claim(store: JobStore, hint: str = "job_none", worker: str = "w@host"):
    return store.claim_next(hint, worker=worker, device_for=lambda spec: "cpu")


def finish(sessions, job_id: str) -> None:
    with sessions.begin() as session:
        session.execute(update(Job).where(Job.id == job_id).values(status="succeeded", finished_at=utcnow()))


def run_one_worker(store: JobStore, sessions) -> list[str]:
    """Claim and finish until nothing is queued; the job ids in the order they ran."""
    order = []
    while (taken := claim(store)) is not None:
        order.append(taken.job_id)
        finish(sessions, taken.job_id)
    return order


def test_one_worker_alternates_owners_so_a_later_small_batch_is_not_starved(store, sessions):
    alice = queue_jobs(sessions, "alice", 20)
    bob = queue_jobs(sessions, "bob", 2)
    order = run_one_worker(store, sessions)
    assert sorted(order) == sorted(alice + bob), "every job ran exactly once"
    assert order[:4] == [alice[0], bob[0], alice[1], bob[1]]
    assert order[4:] == alice[2:], "each owner's jobs run oldest first"


def test_the_owner_with_fewer_running_jobs_goes_first(store, sessions):
    queue_jobs(sessions, "alice", 1, status="running", started_at=utcnow() - dt.timedelta(hours=1))
    [alice_waiting] = queue_jobs(sessions, "alice", 1)
    queue_jobs(sessions, "bob", 1, status="succeeded", started_at=utcnow())
    [bob_waiting] = queue_jobs(sessions, "bob", 1)
    assert claim(store).job_id == bob_waiting, "bob has no job running, alice has one (though her last start is older)"
    assert claim(store).job_id == alice_waiting


def test_the_hinted_job_is_taken_when_it_is_the_fair_one(store, sessions):
    first, second = queue_jobs(sessions, "alice", 2)
    assert claim(store, hint=first).job_id == first
    assert claim(store, hint=first).job_id == second, "a duplicate message takes the next queued job"
    assert claim(store, hint=first) is None, "with nothing queued a message claims nothing"


def test_a_cancel_pending_on_the_hinted_job_is_applied_and_another_job_taken(store, sessions):
    [cancelled] = queue_jobs(sessions, "alice", 1, cancel_requested=True)
    [waiting] = queue_jobs(sessions, "bob", 1)
    assert claim(store, hint=cancelled).job_id == waiting
    with sessions() as session:
        assert session.scalar(select(Job.status).where(Job.id == cancelled)) == "cancelled"


def test_concurrent_workers_never_take_one_job_twice(store, sessions):
    queue_jobs(sessions, "alice", 6)
    queue_jobs(sessions, "bob", 3)
    taken, barrier = [], threading.Barrier(12)

    def work(index: int) -> None:
        barrier.wait()
        result = claim(store, worker=f"w{index}@host")
        taken.append(None if result is None else result.job_id)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    claimed = [job_id for job_id in taken if job_id is not None]
    assert len(claimed) == len(set(claimed)), "no job claimed twice"
    with sessions() as session:
        running = session.scalars(select(Job.id).where(Job.status == "running")).all()
    assert sorted(running) == sorted(claimed)
    assert len(claimed) == 9, "a worker that loses a race picks again, so every queued job is taken"


def test_a_sweeps_jobs_run_largest_first_and_its_table_stays_in_grid_order(store, sessions):
    before = queue_jobs(sessions, "solo", 1)
    widths = [30, 1000, 100, 1000, 10]
    with sessions.begin() as session:
        sweep, sweep_ids = sweeps_repo.create_sweep(
            session,
            owner="solo",
            spec={"name": "widths", "base": SPEC},
            idempotency_key=None,
            request_hash="h" * 64,
            jobs=[
                NewJob(
                    SPEC,
                    {"model": {"hidden": [width]}, "training": {"max_steps": 3}},
                    f"{index:064d}",
                    parameters=width * 10,
                )
                for index, width in enumerate(widths)
            ],
        )
        sweep_id = sweep.id
    after = queue_jobs(sessions, "solo", 1)

    order = run_one_worker(store, sessions)

    by_size = [sweep_ids[index] for index in sorted(range(len(widths)), key=lambda index: (-widths[index], index))]
    assert order == before + by_size + after
    with sessions() as session:
        table = session.scalars(select(Job.id).where(Job.sweep_id == sweep_id).order_by(Job.seq)).all()
    assert table == sweep_ids
