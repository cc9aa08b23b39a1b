"""A cancel racing a delete of the same job, over real connections on both databases (issue 25, item 10).

50 queued jobs (no worker runs), then each job's cancel and DELETE sent at the same moment, on
connections of their own, five jobs (ten requests) at once. The cancel makes the job finished, so the
delete may remove it while the cancel is still answering: before the fix that cancel re-read
the row it had just updated and answered 500 ("Could not refresh instance"), and a delete that
lost to another delete answered 409 for a job that no longer existed (now 404). Allowed now, per job:

- the delete came first: a 409 (the job was still queued), the cancel a 202, the job stays, cancelled;
- the cancel came first: the delete is a 204 and the cancel a 202, or a 404 when the delete
  removed the job before the cancel read it back (what any later request on it gets).
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx

from ntklab.service.app import create_app
from tests.service.serving import serve

PAIRS = 50
AT_ONCE = 5  # pairs per wave: 10 requests, within the connection pool (a wave of all 100 waits on it and gets 503s)
TINY = {
    "model": {"hidden": [4]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 2},
    "training": {"max_steps": 1},
}
ALLOWED = {(202, 409, 200), (202, 204, 404), (404, 204, 404)}


def race(base_url: str, job_ids: list[str], first: str = "POST", suffix: str = "/cancel") -> list[tuple[int, int]]:
    """(cancel's status, delete's status) of each job, every request sent at once on its own connection."""
    start = threading.Barrier(2 * len(job_ids))

    def send(method: str, path: str) -> int:
        with httpx.Client(base_url=base_url, timeout=60) as own:
            own.get("/healthz")  # the connection is open before the barrier
            start.wait()
            return own.request(method, path).status_code

    with ThreadPoolExecutor(2 * len(job_ids)) as pool:
        cancels = [pool.submit(send, first, f"/v1/jobs/{job_id}{suffix}") for job_id in job_ids]
        deletes = [pool.submit(send, "DELETE", f"/v1/jobs/{job_id}") for job_id in job_ids]
        return [(cancel.result(), delete.result()) for cancel, delete in zip(cancels, deletes)]


def test_cancel_racing_delete_is_never_a_500(settings):
    with serve(create_app(settings)) as base_url, httpx.Client(base_url=base_url, timeout=60) as http:
        job_ids = []
        for _ in range(PAIRS):
            created = http.post("/v1/jobs", json=TINY)
            assert created.status_code == 202, created.text
            job_ids.append(created.json()["id"])
        answers = []
        for wave in range(0, PAIRS, AT_ONCE):
            answers += race(base_url, job_ids[wave : wave + AT_ONCE])
        after = [http.get(f"/v1/jobs/{job_id}") for job_id in job_ids]
    outcomes = Counter((cancel, delete, later.status_code) for (cancel, delete), later in zip(answers, after))
    print(dict(outcomes))
    assert set(outcomes) <= ALLOWED, outcomes
    assert all(later.json()["status"] == "cancelled" for later in after if later.status_code == 200)


def test_of_two_deletes_racing_one_deletes_and_the_other_finds_nothing(settings):
    """The loser answered 409 "the job is cancelled; only finished jobs can be deleted" for a job that was gone."""
    with serve(create_app(settings)) as base_url, httpx.Client(base_url=base_url, timeout=60) as http:
        job_ids = [http.post("/v1/jobs", json=TINY).json()["id"] for _ in range(PAIRS // 2)]
        assert all(http.post(f"/v1/jobs/{job_id}/cancel").status_code == 202 for job_id in job_ids)
        answers = []
        for wave in range(0, len(job_ids), AT_ONCE):
            answers += race(base_url, job_ids[wave : wave + AT_ONCE], first="DELETE", suffix="")
    outcomes = Counter(tuple(sorted(pair)) for pair in answers)
    print(dict(outcomes))
    assert set(outcomes) == {(204, 404)}, outcomes
