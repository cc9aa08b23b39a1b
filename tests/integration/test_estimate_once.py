"""The estimate is made once per job, from submission to completion, by a real API and a real worker.

Both processes start with tests/integration/estimate_counter/ first on their PYTHONPATH, whose sitecustomize
wraps ntklab.planner.estimate.estimate_job to write one line per call (the process and the spec's name) before
any module imports it. A job is submitted, polled with GET /v1/jobs/{id} until it succeeds (what the SDK's
wait() does), and read again: its name appears once in the log, written by the API process, and the worker
checked its memory against the stored estimate.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import LiveStack, served

pytestmark = [pytest.mark.slow, pytest.mark.stack]

COUNTER = Path(__file__).parent / "estimate_counter"


@pytest.fixture(scope="module")
def counted(sqlite_stack: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveStack, Path]]:
    log = tmp_path_factory.mktemp("estimates") / "calls.log"
    path = os.pathsep.join(filter(None, [str(COUNTER), os.environ.get("PYTHONPATH")]))
    settings = sqlite_stack | {"PYTHONPATH": path, "NTKLAB_TEST_ESTIMATE_LOG": str(log)}
    with served(settings, tmp_path_factory.mktemp("logs")) as stack:
        yield stack, log


def test_a_job_is_estimated_once_from_submission_to_completion(counted):
    stack, log = counted
    name = f"once-{uuid.uuid4().hex[:8]}"
    spec = {
        "name": name,
        "model": {"hidden": [16]},
        "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4},
        "training": {"max_steps": 20},
    }
    created = stack.client.post("/v1/jobs", json=spec)
    assert created.status_code == 202, created.text
    deadline, reads = time.monotonic() + 120, 0
    while True:
        job = stack.client.get(f"/v1/jobs/{created.json()['id']}").json()
        reads += 1
        if job["status"] in ("succeeded", "failed"):
            break
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    assert job["status"] == "succeeded", job["error"]
    assert stack.client.get(f"/v1/jobs/{job['id']}").json()["estimate"] == job["estimate"] == created.json()["estimate"]
    assert reads >= 1
    calls = [line.split() for line in log.read_text().splitlines() if line.endswith(f" {name}")]
    assert len(calls) == 1, f"estimate_job ran {len(calls)} times for one job: {calls}"
    assert int(calls[0][0]) == stack.api.pid, "made by the API process at submission"
