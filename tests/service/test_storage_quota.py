"""The storage quota per key (issue 25, item 8) on both backends: data sets, models and job artifacts
count against `max_stored_bytes_per_key`; an upload over it is a 413 naming the quota and the usage,
and nothing of it is stored; concurrent uploads of one key serialise on the key's storage lock.

Before the quota, one key's uploads filled the database volume and every key got 503s.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
from sqlalchemy import func, select

from ntklab.service import storage_quota
from ntklab.service.problems import ProblemError
from ntklab.store import storage, uploads_repo
from ntklab.store.job_store import JobStore
from ntklab.store.models import Artifact, Blob, Job
from tests.upload_files import mlp_model, npy, npz

OCTET = {"Content-Type": "application/octet-stream"}
PROBLEM = "application/problem+json"
OWNER = "anonymous"
SMALL_JOB = {"model": {"hidden": [8]}, "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}}


def data_set(seed: int) -> tuple[bytes, int]:
    """An .npz of 12 points, and the bytes it is stored as (the two .npy files: 416 + 320)."""
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(12, 3)), rng.normal(size=(12, 2))
    return npz(x=x, y=y), len(npy(x)) + len(npy(y))


def upload(client, body: bytes):
    return client.post("/v1/datasets", content=body, headers=OCTET)


def blob_bytes(client) -> int:
    with client.app.state.sessions() as session:
        return session.scalar(select(func.coalesce(func.sum(Blob.size), 0)))


def assert_over_quota(answer, limit: int, usage: int) -> dict:
    assert answer.status_code == 413, answer.text
    assert answer.headers["content-type"] == PROBLEM
    problem = answer.json()
    assert problem["type"] == "urn:ntklab:problem:storage-quota"
    assert problem["errors"] == [
        {"field": "stored_bytes", "message": problem["errors"][0]["message"], "limit": limit, "value": usage}
    ]
    assert "max_stored_bytes_per_key" in problem["detail"]
    return problem


def test_an_upload_past_the_quota_is_a_413_naming_quota_and_usage_and_stores_nothing(client_with):
    first, size = data_set(0)
    second, _ = data_set(1)
    third, _ = data_set(2)
    client = client_with(max_stored_bytes_per_key=2 * size + size // 2)
    assert upload(client, first).status_code == 201
    assert upload(client, second).status_code == 201
    assert blob_bytes(client) == 2 * size

    problem = assert_over_quota(upload(client, third), limit=2 * size + size // 2, usage=2 * size)
    assert f"this upload adds {size}" in problem["detail"]
    assert blob_bytes(client) == 2 * size
    assert upload(client, first).status_code == 200, "the same arrays again add nothing: still allowed"

    model = mlp_model().SerializeToString()
    assert_over_quota(client.post("/v1/models", content=model, headers=OCTET), 2 * size + size // 2, 2 * size)

    listed = client.get("/v1/datasets").json()["data"]
    assert client.delete(f"/v1/datasets/{listed[0]['id']}").status_code == 204
    assert upload(client, third).status_code == 201, "deleting a data set makes room"


def test_a_key_at_its_quota_is_refused_before_its_body_is_read(client_with):
    first, size = data_set(0)
    client = client_with(max_stored_bytes_per_key=size)
    assert upload(client, first).status_code == 201
    answer = upload(client, data_set(1)[0])
    assert_over_quota(answer, limit=size, usage=size)
    assert answer.headers["connection"] == "close"


def test_the_quota_is_per_key(client_with, tmp_path):
    first, size = data_set(0)
    client = client_with(max_stored_bytes_per_key=size)
    with client.app.state.sessions() as session:
        uploads_repo.save_blob(session, "someone-else", "0" * 64, 10 * size, file_of(tmp_path, 10 * size))
        session.commit()
    assert upload(client, first).status_code == 201


def file_of(folder: Path, size: int) -> Path:
    path = folder / f"blob-{size}"
    path.write_bytes(b"\0" * size)
    return path


def test_two_uploads_of_one_key_serialise_on_its_storage_lock(client_with, tmp_path):
    """The first reservation holds the key's lock until it commits: the second waits, then counts
    the first's bytes and is refused. Counting without the lock would let both in (2 × 600 > 1000)."""
    client = client_with(max_stored_bytes_per_key=1000)
    settings, sessions = client.app.state.settings, client.app.state.sessions
    outcome: list[str] = []

    def second() -> None:
        with sessions() as session:
            try:
                storage_quota.reserve(session, OWNER, [("b" * 64, 600)], settings)
                uploads_repo.save_blob(session, OWNER, "b" * 64, 600, file_of(tmp_path, 600))
                session.commit()
                outcome.append("stored")
            except ProblemError as refused:
                outcome.append(f"refused {refused.status_code}")

    with sessions() as session:
        storage_quota.reserve(session, OWNER, [("a" * 64, 600)], settings)
        uploads_repo.save_blob(session, OWNER, "a" * 64, 600, file_of(tmp_path, 600))
        waiting = threading.Thread(target=second)
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive(), "the second upload waits while the first holds the key's storage lock"
        session.commit()
    waiting.join(30)
    assert outcome == ["refused 413"]
    assert blob_bytes(client) == 600


def test_artifacts_that_would_pass_the_quota_are_skipped_and_named(client_with):
    first, size = data_set(0)
    client = client_with(max_stored_bytes_per_key=size + 1000)
    assert upload(client, first).status_code == 201
    job_id = client.post("/v1/jobs", json=SMALL_JOB).json()["id"]
    store = JobStore(client.app.state.sessions)
    claim = store.claim(job_id, worker="w0", device="cpu")
    artifacts = {
        "a.npy": ("application/octet-stream", b"a" * 600),
        "b.npy": ("application/octet-stream", b"b" * 600),
        "c.json": ("application/json", b"c" * 300),
    }
    store.finish(
        claim, "succeeded", summary=lambda seconds: {"loss": 1.0}, artifacts=artifacts, max_stored_bytes=size + 1000
    )

    with client.app.state.sessions() as session:
        stored = dict(session.execute(select(Artifact.name, Artifact.size).where(Artifact.job_id == job_id)).all())
        summary = session.scalar(select(Job.summary).where(Job.id == job_id))
        used = storage.usage(session, OWNER)
    assert stored == {"a.npy": 600, "c.json": 300}
    assert summary["loss"] == 1.0
    assert summary["artifacts_skipped"].startswith(f"b.npy (600 bytes; the key stores {size + 600} of its quota")
    assert "max_stored_bytes_per_key" in summary["artifacts_skipped"]
    assert used == size + 900 <= size + 1000

    answer = upload(client, data_set(1)[0])
    assert_over_quota(answer, limit=size + 1000, usage=size + 900)
