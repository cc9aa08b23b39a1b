"""The /v1/jobs resource on a real database: create, retrieve, page, idempotency, cancel, delete, metrics, artifacts.

Rows a worker would write (status changes, metric chunks, artifacts) are arranged directly in SQL.
"""

from __future__ import annotations

import datetime as dt
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select

from ntklab.store.job_store import JobStore
from ntklab.store.models import Artifact, Job, JobTag, MetricChunk, Sweep, utcnow
from tests.stored_artifacts import add_artifact
from tests.worker_writes import written_by_a_worker

SMALL = {"model": {"hidden": [8]}, "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}}
SMALL_PARAMETERS = (4 * 8 + 8) + (8 * 2 + 2)  # d=4 → 8 hidden (+bias) → O=2 one-hot classes (+bias)


def submit(client, body=None, **headers):
    answer = client.post("/v1/jobs", json=SMALL if body is None else body, headers=headers)
    assert answer.status_code == 202, answer.text
    return answer.json()


# --------------------------------------------------------------------------- create and retrieve


def test_create_answers_202_with_location_and_stores_the_filled_spec(client, app, db):
    answer = client.post("/v1/jobs", json=SMALL | {"name": "small", "tags": ["a", "b"]})
    assert answer.status_code == 202
    job = answer.json()
    assert answer.headers["location"] == f"http://testserver/v1/jobs/{job['id']}"
    assert int(answer.headers["retry-after"]) >= 1
    assert job["status"] == "queued" and job["attempts"] == 0 and job["cancel_requested"] is False
    assert job["parameters"] == SMALL_PARAMETERS
    assert job["progress"] == {"step": 0, "total": 5000, "phase": "queued", "eta_s": None}
    assert job["spec"]["model"]["output_dim"] == 2, "the spec is stored with defaults filled in"
    assert job["tags"] == ["a", "b"] and job["name"] == "small"
    assert dt.datetime.fromisoformat(job["created_at"]).utcoffset() == dt.timedelta(0)

    again = client.get(f"/v1/jobs/{job['id']}")
    assert again.status_code == 200
    assert again.json() == job
    assert db.scalar(select(Job.parameters).where(Job.id == job["id"])) == SMALL_PARAMETERS
    assert app.state.broker.depth() == 1, "the job was published to the broker"


def test_retrieve_shows_what_the_worker_wrote(client, db):
    job = submit(client)
    started = utcnow()
    written_by_a_worker(
        db,
        job["id"],
        status="succeeded",
        attempts=2,
        device="cpu",
        progress_step=5000,
        progress_phase="succeeded",
        progress_eta_s=0.0,
        summary={"final_loss": 1e-4, "converged": True, "outcome": "converged"},
        started_at=started,
        finished_at=started,
    )
    shown = client.get(f"/v1/jobs/{job['id']}").json()
    assert shown["status"] == "succeeded" and shown["attempts"] == 2 and shown["device"] == "cpu"
    assert shown["progress"] == {"step": 5000, "total": 5000, "phase": "succeeded", "eta_s": 0.0}
    assert shown["summary"] == {"final_loss": 1e-4, "converged": True, "outcome": "converged"}
    assert dt.datetime.fromisoformat(shown["finished_at"]) == started


def test_unknown_job_is_a_404_problem(client):
    for path in ("/v1/jobs/job_nope", "/v1/jobs/job_nope/metrics", "/v1/jobs/job_nope/artifacts"):
        answer = client.get(path)
        assert answer.status_code == 404
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["status"] == 404


# --------------------------------------------------------------------------- paging


def walk(client, limit: int, **query) -> list[str]:
    seen, after, pages = [], None, 0
    while True:
        params = dict(query, limit=limit) | ({"after": after} if after else {})
        page = client.get("/v1/jobs", params=params).json()
        assert len(page["data"]) <= limit
        assert all(job["spec"] is None for job in page["data"])
        seen += [job["id"] for job in page["data"]]
        pages += 1
        if not page["has_more"]:
            assert page["next"] is None
            return seen
        after = page["next"]
        assert pages < 100


def test_paging_visits_every_job_once_with_each_filter(client, db):
    ids = [
        submit(client, SMALL | {"tags": [t for t, k in (("even", 2), ("third", 3)) if i % k == 0]})["id"]
        for i in range(23)
    ]
    newest_first = ids[::-1]
    for i in (1, 4, 7, 10):
        written_by_a_worker(db, ids[i], status="running")
    for i in (2, 3, 9, 12, 15):
        written_by_a_worker(db, ids[i], status="succeeded")
    sweep = Sweep(spec={"grid": {}})
    db.add(sweep)
    db.commit()
    for i in (0, 5, 6):
        written_by_a_worker(db, ids[i], sweep_id=sweep.id)
    status = {job_id: db.scalar(select(Job.status).where(Job.id == job_id)) for job_id in ids}

    cases = [
        ({}, newest_first),
        ({"tag": "even"}, [j for j in newest_first if ids.index(j) % 2 == 0]),
        ({"status": "queued"}, [j for j in newest_first if status[j] == "queued"]),
        ({"status": ["running", "succeeded"]}, [j for j in newest_first if status[j] in ("running", "succeeded")]),
        (
            {"tag": "third", "status": "succeeded"},
            [j for j in newest_first if ids.index(j) % 3 == 0 and status[j] == "succeeded"],
        ),
        ({"sweep_id": sweep.id}, [ids[6], ids[5], ids[0]]),
        ({"tag": "nobody"}, []),
    ]
    for query, expected in cases:
        for limit in (1, 4, 23, 200):
            assert walk(client, limit, **query) == expected, (query, limit)


def test_jobs_created_while_paging_neither_shift_nor_repeat_pages(client):
    ids = [submit(client)["id"] for _ in range(9)]
    first = client.get("/v1/jobs", params={"limit": 4}).json()
    late = [submit(client)["id"] for _ in range(3)]
    rest = walk_from(client, first["next"], limit=4)
    assert [job["id"] for job in first["data"]] + rest == ids[::-1]
    assert not set(late) & set(rest)


def walk_from(client, after: str, limit: int) -> list[str]:
    seen = []
    while after:
        page = client.get("/v1/jobs", params={"limit": limit, "after": after}).json()
        seen += [job["id"] for job in page["data"]]
        after = page["next"]
    return seen


# --------------------------------------------------------------------------- idempotency


def test_same_key_and_same_body_replays_the_first_answer(client, db):
    first = client.post("/v1/jobs", json=SMALL, headers={"Idempotency-Key": "k-1"})
    reordered = json.dumps({"data": SMALL["data"], "model": {"hidden": [8], "bias": True}}, indent=2)
    second = client.post(
        "/v1/jobs", content=reordered, headers={"Idempotency-Key": "k-1", "content-type": "application/json"}
    )
    assert first.status_code == second.status_code == 202
    assert second.json()["id"] == first.json()["id"]
    assert second.headers["location"] == first.headers["location"]
    assert second.headers["idempotent-replayed"] == "true"
    assert db.scalar(select(func.count()).select_from(Job)) == 1
    other = client.post("/v1/jobs", json=SMALL, headers={"Idempotency-Key": "k-2"})
    assert other.json()["id"] != first.json()["id"]


def test_same_key_with_a_different_body_is_a_422_naming_the_header(client, db):
    client.post("/v1/jobs", json=SMALL, headers={"Idempotency-Key": "k-1"})
    answer = client.post("/v1/jobs", json=SMALL | {"seed": 1}, headers={"Idempotency-Key": "k-1"})
    assert answer.status_code == 422
    problem = answer.json()
    assert problem["type"] == "urn:ntklab:problem:idempotency-key-reused"
    assert problem["errors"][0]["field"] == "Idempotency-Key"
    assert db.scalar(select(func.count()).select_from(Job)) == 1


def test_concurrent_retries_with_one_key_make_one_job(client, db):
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(
            pool.map(lambda _: client.post("/v1/jobs", json=SMALL, headers={"Idempotency-Key": "race"}), range(6))
        )
    assert {answer.status_code for answer in answers} == {202}
    assert len({answer.json()["id"] for answer in answers}) == 1
    assert db.scalar(select(func.count()).select_from(Job)) == 1


# --------------------------------------------------------------------------- cancel and delete


def test_cancel_a_queued_job_cancels_it_at_once(client):
    job = submit(client)
    answer = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert answer.status_code == 202
    assert answer.json()["status"] == "cancelled" and answer.json()["finished_at"] is not None
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 202, "a retried cancel is harmless"


def test_cancel_a_running_job_sets_the_flag_the_worker_reads(client, db):
    job = submit(client)
    written_by_a_worker(db, job["id"], status="running", attempts=1)
    answer = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert answer.status_code == 202
    assert answer.json()["status"] == "running" and answer.json()["cancel_requested"] is True
    db.expire_all()
    assert db.scalar(select(Job.cancel_requested).where(Job.id == job["id"])) is True


@pytest.mark.parametrize(
    ("ending", "outcome"), [("succeeded", "too_late"), ("failed", "too_late"), ("cancelled", "cancelled")]
)
def test_a_cancel_the_worker_never_saw_says_too_late_and_the_results_stand(client, app, ending, outcome):
    """The worker's own writes (claim, finish): a cancel accepted during the last moments of a run."""
    job = submit(client)
    worker = JobStore(app.state.sessions)
    claim = worker.claim(job["id"], worker="w0", device="cpu")
    accepted = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert accepted.status_code == 202
    assert (accepted.json()["cancel_requested"], accepted.json()["cancel_outcome"]) == (True, "pending")
    worker.finish(claim, ending, summary={"final_loss": 0.5} if ending == "succeeded" else None)
    finished = client.get(f"/v1/jobs/{job['id']}").json()
    assert (finished["status"], finished["cancel_outcome"]) == (ending, outcome)
    assert finished["summary"] == ({"final_loss": 0.5} if ending == "succeeded" else None)
    assert client.get("/v1/jobs", params={"status": ending}).json()["data"][0]["cancel_outcome"] == outcome


def test_a_job_nobody_cancelled_has_no_cancel_outcome(client):
    assert submit(client)["cancel_outcome"] is None


@pytest.mark.parametrize("status", ["succeeded", "failed"])
def test_cancel_a_finished_job_is_a_409(client, db, status):
    job = submit(client)
    written_by_a_worker(db, job["id"], status=status)
    answer = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert answer.status_code == 409
    assert answer.json()["type"] == "urn:ntklab:problem:invalid-state"
    assert client.post("/v1/jobs/job_nope/cancel").status_code == 404


def test_delete_only_finished_jobs_and_everything_they_own(client, db):
    job = submit(client, SMALL | {"tags": ["t"]})
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 409
    written_by_a_worker(db, job["id"], status="running")
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 409
    written_by_a_worker(db, job["id"], status="succeeded")
    db.add(MetricChunk(job_id=job["id"], name="loss", chunk=0, steps=[0], values=[1.0]))
    add_artifact(db, job["id"], "a.json", "application/json", b"{}")
    db.commit()
    answer = client.delete(f"/v1/jobs/{job['id']}")
    assert answer.status_code == 204 and answer.content == b""
    assert client.get(f"/v1/jobs/{job['id']}").status_code == 404
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 404
    for table in (Job, JobTag, MetricChunk, Artifact):
        assert db.scalar(select(func.count()).select_from(table)) == 0, table.__tablename__


# --------------------------------------------------------------------------- metrics


def test_metrics_concatenate_chunks_in_chunk_order(client, db):
    job, other = submit(client), submit(client)
    steps = list(range(0, 20_000, 2))
    values = [1.0 / (1 + step) for step in steps]
    bounds = [0, 2500, 5000, 7500, 10_000]
    for chunk in (2, 0, 3, 1):
        lo, hi = bounds[chunk], bounds[chunk + 1]
        db.add(MetricChunk(job_id=job["id"], name="loss", chunk=chunk, steps=steps[lo:hi], values=values[lo:hi]))
    db.add(MetricChunk(job_id=job["id"], name="delta_k", chunk=0, steps=[0, 10, 20], values=[0.0, None, 0.25]))
    db.add(MetricChunk(job_id=other["id"], name="loss", chunk=0, steps=[0], values=[99.0]))
    db.commit()

    loss = client.get(f"/v1/jobs/{job['id']}/metrics", params={"names": "loss"}).json()
    assert list(loss) == ["loss"]
    assert loss["loss"]["step"] == steps and loss["loss"]["value"] == values

    both = client.get(f"/v1/jobs/{job['id']}/metrics", params={"names": "delta_k, loss,unknown"}).json()
    assert set(both) == {"loss", "delta_k"}
    assert both["delta_k"] == {"step": [0, 10, 20], "value": [0.0, None, 0.25]}
    assert client.get(f"/v1/jobs/{job['id']}/metrics").json() == both
    assert client.get(f"/v1/jobs/{other['id']}/metrics").json() == {"loss": {"step": [0], "value": [99.0]}}


# --------------------------------------------------------------------------- artifacts


@pytest.fixture
def job_with_artifacts(client, db):
    job = submit(client)
    files = {
        "kernel_init.npy": ("application/octet-stream", b"\x93NUMPY\x01\x00" + bytes(range(256))),
        "eigenvalues.json": ("application/json", b'{"init": [1.0, 2.0]}'),
        "delta_k.png": ("image/png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64),
    }
    for name, (media_type, data) in files.items():
        add_artifact(db, job["id"], name, media_type, data)
    db.commit()
    return job["id"], files


def test_artifacts_list_and_download_with_their_media_type(client, job_with_artifacts):
    job_id, files = job_with_artifacts
    listed = client.get(f"/v1/jobs/{job_id}/artifacts").json()["data"]
    assert [entry["name"] for entry in listed] == sorted(files)
    for entry in listed:
        media_type, data = files[entry["name"]]
        assert entry["media_type"] == media_type and entry["size"] == len(data)
        assert entry["url"] == f"http://testserver/v1/jobs/{job_id}/artifacts/{entry['name']}"
        download = client.get(entry["url"])
        assert download.status_code == 200
        assert download.content == data
        assert download.headers["content-type"].split(";")[0] == media_type


def test_head_on_an_artifact_answers_the_download_headers_without_the_bytes(client, job_with_artifacts):
    job_id, files = job_with_artifacts
    for name, (_, data) in files.items():
        url = f"/v1/jobs/{job_id}/artifacts/{name}"
        head, download = client.head(url), client.get(url)
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == str(len(data))
        for header in ("content-type", "content-length", "content-disposition"):
            assert head.headers[header] == download.headers[header]
    missing = client.head(f"/v1/jobs/{job_id}/artifacts/nope.npy")
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
    assert client.head("/v1/jobs/job_nope/artifacts/kernel_init.npy").status_code == 404


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "%2e%2e%2fx",
        "..%2fkernel_init.npy",
        "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "KERNEL_INIT.NPY",
        "kernel_init",
        "%2e",
        "%2e%2e",
    ],
)
def test_artifact_names_match_exactly_so_traversal_is_a_404(client, job_with_artifacts, name):
    job_id, _ = job_with_artifacts
    answer = client.get(f"/v1/jobs/{job_id}/artifacts/{name}")
    assert answer.status_code == 404
    assert answer.headers["content-type"] == "application/problem+json"
