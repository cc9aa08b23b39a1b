"""Fairness with a real API (auth on) and one real `celery worker` on the embedded stack.

Alice submits 20 jobs, then Bob submits 2; the worker starts only after all 22 are queued,
so the order it runs them in is decided by the claims alone. Bob's jobs must run second and
fourth (alternating owners), not after Alice's twenty.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from ntklab.localstack import LocalStack, wait_until
from ntklab.store import api_keys
from ntklab.store.db import make_engine, make_session_factory
from ntklab.store.models import Job

pytestmark = [pytest.mark.slow, pytest.mark.stack]

TINY = {
    "model": {"hidden": [8]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 3, "probe": {"n": 2}},
    "training": {"max_steps": 3, "target_loss": None},
    "diagnostics": {"hessian": None, "save_kernels": [], "save_weights": False},
}
ALL_DONE_TIMEOUT_S = 240


def test_a_later_small_batch_of_another_key_runs_before_most_of_a_big_one(sqlite_stack, tmp_path):
    sessions = make_session_factory(make_engine(sqlite_stack["NTKLAB_DATABASE_URL"]))
    with sessions() as session:
        alice = {"X-API-Key": api_keys.create_key(session, "alice").secret}
        bob = {"X-API-Key": api_keys.create_key(session, "bob").secret}
    stack = LocalStack(sqlite_stack | {"NTKLAB_AUTH": "on"}, tmp_path)
    try:
        stack.start_api()
        alice_ids = [submit(stack, alice, index) for index in range(20)]
        bob_ids = [submit(stack, bob, index) for index in range(2)]
        stack.start_worker()
        wait_until(lambda: finished(sessions) == 22, ALL_DONE_TIMEOUT_S, f"22 jobs never finished; see {tmp_path}")
    finally:
        stack.stop()
    with sessions() as session:
        order = list(session.scalars(select(Job.id).order_by(Job.started_at)))
        statuses = set(session.scalars(select(Job.status)))
    assert statuses == {"succeeded"}
    assert [order.index(job_id) for job_id in bob_ids] == [1, 3], order
    assert [job_id for job_id in order if job_id in alice_ids] == alice_ids, "alice's jobs ran oldest first"


def submit(stack: LocalStack, headers: dict[str, str], seed: int) -> str:
    answer = stack.client.post("/v1/jobs", json=TINY | {"seed": seed}, headers=headers)
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def finished(sessions) -> int:
    with sessions() as session:
        return len(session.scalars(select(Job.id).where(Job.status.in_(("succeeded", "failed", "cancelled")))).all())
