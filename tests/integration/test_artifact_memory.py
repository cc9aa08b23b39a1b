"""A 200 MiB artifact downloads from a live API with bounded memory, on SQLite and on PostgreSQL.

The API streams the artifact's blob a chunk (1 MiB) at a time (service/api/routes/artifacts.py),
so the peak resident memory of the API process (VmHWM in /proc/<pid>/status, the high-water
mark of its RSS) grows by a few chunks, not by the file. The artifact is written through the
worker's store API (JobStore.finish) into the stack's database, not by running a job.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from ntklab.store.db import make_engine, make_session_factory
from ntklab.store.job_store import JobStore
from ntklab.store.models import BlobChunk
from tests.conftest import LiveStack

pytestmark = pytest.mark.slow

SIZE = 200 * 2**20
BOUND = 64 * 2**20
NAME = "kernel_final.npy"
WARM_UP = b'{"warm": "up"}'


@pytest.fixture(params=["postgresql", "sqlite"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """A live API (no worker; the reaper off, so the claimed job stays this test's) on either database."""
    backing = "postgres_redis_stack" if request.param == "postgresql" else "sqlite_stack"
    settings = request.getfixturevalue(backing) | {"NTKLAB_REAPER_ENABLED": "false"}
    stack = LiveStack(settings, tmp_path_factory.mktemp("logs"))
    try:
        stack.start_api()
        yield stack
    finally:
        stack.stop()


def peak_rss(pid: int) -> int:
    """The process's peak resident set size in bytes (VmHWM, reported in kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def stored_artifact(stack: LiveStack, data: bytes) -> str:
    """A job of the stack's API, claimed and finished through JobStore with `data` as its artifact NAME (and a small
    warm.json beside it); its id."""
    answer = stack.client.post("/v1/jobs", json={"model": {"hidden": [4]}, "training": {"max_steps": 1}})
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["id"]
    engine = make_engine(stack.settings["NTKLAB_DATABASE_URL"])
    try:
        sessions = make_session_factory(engine)
        store = JobStore(sessions)
        claim = store.claim(job_id, worker="w0", device="cpu")
        artifacts = {NAME: ("application/x-npy", data), "warm.json": ("application/json", WARM_UP)}
        store.finish(claim, "succeeded", summary={"loss": 0.0}, artifacts=artifacts)
        with sessions() as session:
            assert session.scalar(select(func.count()).select_from(BlobChunk)) == SIZE // 2**20 + 1
    finally:
        engine.dispose()
    return job_id


def test_a_200_mib_artifact_downloads_with_bounded_api_memory(api: LiveStack):
    data = os.urandom(SIZE)
    job_id = stored_artifact(api, data)
    expected = hashlib.sha256(data).hexdigest()
    del data
    assert api.client.get(f"/v1/jobs/{job_id}/artifacts/warm.json").content == WARM_UP  # the route's first call
    url = f"/v1/jobs/{job_id}/artifacts/{NAME}"

    before = peak_rss(api.api.pid)
    digest, received = hashlib.sha256(), 0
    with api.client.stream("GET", url, timeout=120) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-length"] == str(SIZE) and answer.headers["etag"] == f'"{expected}"'
        for piece in answer.iter_bytes():
            digest.update(piece)
            received += len(piece)
    growth = peak_rss(api.api.pid) - before

    assert (received, digest.hexdigest()) == (SIZE, expected)
    print(
        f"API peak RSS {before / 2**20:.1f} MiB before, grew by {growth / 2**20:.1f} MiB for a {SIZE / 2**20:.0f} MiB download"
    )
    assert growth < BOUND, f"the API's peak RSS grew by {growth / 2**20:.1f} MiB streaming {SIZE / 2**20:.0f} MiB"
