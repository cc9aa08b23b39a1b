"""Deleting an upload races a submission naming it (issue 25, item 9): one of the two loses, on both stacks.

Each round uploads a data set (and, in a third of the rounds, an ONNX model), then sends the
upload's DELETE and a submission naming it (a job or a two-point sweep) at the same moment,
from two threads with their own connections, against a live API (uvicorn) and no worker, so
every accepted job is still queued when the round ends. The only outcomes allowed:

- the delete wins: 204, and the submission is a 422 naming `data.id` or `model.id` (what an
  unknown id gets), or
- the submission wins: 202, and the delete is a 409 listing the jobs; the upload is still there.

Before the fix both succeeded in most rounds (the submission looked the upload up, then the
delete checked for jobs that did not exist yet and deleted it, then the job was inserted) and
every such job failed `UploadMissing` once a worker took it: measured with this test on the
code before (rounds where both succeeded, of 50) PostgreSQL 21 and 24, SQLite 27 and 17, and
35 of 67 and 26 of 66 accepted jobs failed `UploadMissing`. Now the delete and the submission
serialise on the upload's row (store/uploads_repo.py): after the races a worker is started and
runs every accepted job, and none fails.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import numpy as np
import pytest

from tests.conftest import LiveStack
from tests.upload_files import mlp_onnx, mlp_weights, npz

pytestmark = [pytest.mark.stack]

ROUNDS = 50
POINTS, D, OUT = 8, 3, 2
LEAD_S = 0.004
"""The submission starts up to this much after the delete, or the delete up to a submission's (median) latency after
the submission (at random), so that the delete lands before, during and after the submission's transaction."""
RUN_TIMEOUT_S = 60.0
TINY = {
    "model": {"hidden": [4]},
    "training": {"max_steps": 2, "target_loss": None},
    "diagnostics": {"hessian": None, "save_kernels": [], "save_weights": False},
}
OCTET = {"Content-Type": "application/octet-stream"}
# (what is deleted, what is submitted): the model rounds submit a job naming both the data set and the model
KINDS = (("dataset", "job"), ("dataset", "sweep"), ("model", "job"))


@dataclass
class Round:
    number: int
    deleted: str
    submitted: str
    upload_id: str
    delete: httpx.Response
    submit: httpx.Response

    def job_ids(self) -> list[str]:
        body = self.submit.json()
        return [body["id"]] if self.submitted == "job" else [row["job_id"] for row in body["table"]]


@pytest.fixture(scope="module", params=["postgres+redis", "sqlite+filesystem"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The API alone: nothing runs a job until the races are over (the test starts a worker then)."""
    backing = request.getfixturevalue("postgres_redis_stack" if request.param == "postgres+redis" else "sqlite_stack")
    live = LiveStack(backing, tmp_path_factory.mktemp("logs"))
    try:
        live.start_api()
        yield live
    finally:
        live.stop()


def test_a_delete_and_a_submission_naming_the_upload_never_both_succeed(stack: LiveStack):
    started = time.monotonic()
    rng = random.Random(25)
    with (
        httpx.Client(base_url=stack.url, timeout=30) as deleter,
        httpx.Client(base_url=stack.url, timeout=30) as submitter,
    ):
        rounds: list[Round] = []
        for number in range(ROUNDS):
            latency = statistics.median([r.submit.elapsed.total_seconds() for r in rounds] or [0.02])
            rounds.append(race(number, rng.uniform(-LEAD_S, latency), stack.client, deleter, submitter))
    raced_s = time.monotonic() - started

    outcomes = Counter((r.deleted, r.submitted, r.delete.status_code, r.submit.status_code) for r in rounds)
    print(
        f"\n{ROUNDS} rounds in {raced_s:.1f} s (median submission {latency * 1000:.0f} ms): "
        + ", ".join(f"delete {what} {d} + {sub} {s}: {n}" for (what, sub, d, s), n in sorted(outcomes.items()))
    )
    both = [r for r in rounds if r.delete.status_code == 204 and r.submit.status_code == 202]
    assert not both, (
        f"{len(both)} of {ROUNDS} rounds both deleted the upload and accepted a job naming it: "
        + ", ".join(f"round {r.number} ({r.deleted}, {r.submitted})" for r in both)
    )
    for r in rounds:
        if r.delete.status_code == 204:
            assert r.submit.status_code == 422, (r.number, r.submit.status_code, r.submit.text)
            assert [error["field"] for error in r.submit.json()["errors"]] == [
                "model.id" if r.deleted == "model" else "data.id"
            ]
            assert stack.client.get(f"/v1/{r.deleted}s/{r.upload_id}").status_code == 404
        else:
            assert (r.delete.status_code, r.submit.status_code) == (409, 202), (r.number, r.delete.text, r.submit.text)
            assert r.delete.json()["type"] == "urn:ntklab:problem:invalid-state"
            assert r.job_ids()[0] in r.delete.json()["detail"]
            assert stack.client.get(f"/v1/{r.deleted}s/{r.upload_id}").status_code == 200
    wins = Counter(r.delete.status_code for r in rounds)
    assert wins[204] and wins[409], f"the races always went one way ({dict(wins)}): the test no longer races"

    accepted = [job_id for r in rounds if r.submit.status_code == 202 for job_id in r.job_ids()]
    stack.start_worker()
    finished = wait_for(stack.client, accepted)
    failed = {job_id: job["error"] for job_id, job in finished.items() if job["status"] != "succeeded"}
    assert not failed, f"{len(failed)} of {len(accepted)} accepted jobs did not succeed: {failed}"
    print(f"{len(accepted)} accepted jobs all succeeded; {time.monotonic() - started:.1f} s in all")


def race(number: int, offset: float, client: httpx.Client, deleter: httpx.Client, submitter: httpx.Client) -> Round:
    deleted, submitted = KINDS[number % len(KINDS)]
    data = np.random.default_rng(number)
    dataset = client.post(
        "/v1/datasets", content=npz(x=data.normal(size=(POINTS, D)), y=data.normal(size=(POINTS, OUT))), headers=OCTET
    )
    assert dataset.status_code == 201, dataset.text
    spec = {**TINY, "data": {"kind": "dataset", "id": dataset.json()["id"], "probe": {"n": 2}}}
    upload_id = dataset.json()["id"]
    if deleted == "model":
        model = client.post("/v1/models", content=mlp_onnx(weights=mlp_weights(D, 4, OUT, seed=number)), headers=OCTET)
        assert model.status_code == 201, model.text
        upload_id = model.json()["id"]
        spec["model"] = {"kind": "onnx", "id": upload_id}
    path, body = ("/v1/jobs", spec) if submitted == "job" else ("/v1/sweeps", {"base": spec, "grid": {"seed": [0, 1]}})
    barrier = threading.Barrier(2)

    def delete() -> httpx.Response:
        barrier.wait()
        time.sleep(max(offset, 0.0))
        return deleter.delete(f"/v1/{deleted}s/{upload_id}")

    def submit() -> httpx.Response:
        barrier.wait()
        time.sleep(max(-offset, 0.0))
        return submitter.post(path, json=body)

    with ThreadPoolExecutor(2) as pool:
        deleting, submitting = pool.submit(delete), pool.submit(submit)
        return Round(number, deleted, submitted, upload_id, deleting.result(), submitting.result())


def wait_for(client: httpx.Client, job_ids: list[str]) -> dict[str, dict]:
    """Each job once it is final (succeeded, failed or cancelled)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    finished: dict[str, dict] = {}
    while len(finished) < len(job_ids):
        for job_id in job_ids:
            if job_id not in finished:
                job = client.get(f"/v1/jobs/{job_id}").json()
                if job["status"] in ("succeeded", "failed", "cancelled"):
                    finished[job_id] = job
        assert time.monotonic() < deadline, f"{len(job_ids) - len(finished)} jobs unfinished after {RUN_TIMEOUT_S} s"
        time.sleep(0.2)
    return finished
