"""Artifacts as content-addressed blobs: stored in chunks once per owner and content, streamed out with
Content-Length, an ETag (the SHA-256), If-None-Match → 304 and single byte ranges (206 / 416); on both databases."""

from __future__ import annotations

import hashlib
import random

import pytest
from sqlalchemy import func, select, update

from ntklab.store import storage
from ntklab.store.job_store import JobStore
from ntklab.store.models import Artifact, Blob, BlobChunk, Job
from ntklab.store.uploads_repo import BLOB_CHUNK_BYTES
from tests.service.test_jobs_api import submit

BIG = random.Random(28).randbytes(2 * BLOB_CHUNK_BYTES + 12345)
"""Three chunks, the last one short: ranges that cross chunk boundaries. Seeded, so that every pytest-xdist
worker collects the same ETag parameters."""
BIG_TAG = f'"{hashlib.sha256(BIG).hexdigest()}"'


def finished_with(client, artifacts: dict[str, tuple[str, bytes]]) -> str:
    """A job claimed and finished by the worker's store API (JobStore) with these artifacts; its id."""
    job_id = submit(client)["id"]
    store = JobStore(client.app.state.sessions)
    claim = store.claim(job_id, worker="w0", device="cpu")
    store.finish(
        claim,
        "succeeded",
        summary={"loss": 0.0},
        artifacts=artifacts,
        max_stored_bytes=client.app.state.settings.max_stored_bytes_per_key,
    )
    return job_id


@pytest.fixture
def big(client) -> str:
    """The URL of a job's 2 MiB + 12345 byte artifact."""
    job_id = finished_with(client, {"kernel.npy": ("application/x-npy", BIG)})
    return f"/v1/jobs/{job_id}/artifacts/kernel.npy"


def count(client, table) -> int:
    with client.app.state.sessions() as session:
        return session.scalar(select(func.count()).select_from(table))


def test_a_download_streams_the_whole_file_with_length_etag_and_ranges_accepted(client, big):
    answer = client.get(big)
    assert answer.status_code == 200
    assert answer.content == BIG
    assert answer.headers["content-length"] == str(len(BIG))
    assert answer.headers["etag"] == BIG_TAG
    assert answer.headers["accept-ranges"] == "bytes"
    assert answer.headers["content-type"] == "application/x-npy"
    assert "content-range" not in answer.headers
    head = client.head(big)
    assert head.status_code == 200 and head.content == b""
    assert {key: head.headers[key] for key in ("content-length", "etag", "accept-ranges", "content-type")} == {
        "content-length": str(len(BIG)),
        "etag": BIG_TAG,
        "accept-ranges": "bytes",
        "content-type": "application/x-npy",
    }


def test_the_worker_stores_an_artifact_as_a_blob_in_chunks(client, big):
    with client.app.state.sessions() as session:
        blob = session.scalars(select(Blob)).one()
        chunks = session.scalars(
            select(BlobChunk.data).where(BlobChunk.blob_id == blob.id).order_by(BlobChunk.chunk)
        ).all()
        artifact = session.scalars(select(Artifact)).one()
    assert (blob.sha256, blob.size, blob.chunks) == (hashlib.sha256(BIG).hexdigest(), len(BIG), 3)
    assert [len(chunk) for chunk in chunks] == [BLOB_CHUNK_BYTES, BLOB_CHUNK_BYTES, 12345]
    assert (artifact.blob_id, artifact.size) == (blob.id, len(BIG))


@pytest.mark.parametrize("if_none_match", [BIG_TAG, f"W/{BIG_TAG}", f'"other", {BIG_TAG}', "*"])
def test_if_none_match_naming_the_etag_is_304_without_a_body(client, big, if_none_match):
    answer = client.get(big, headers={"If-None-Match": if_none_match})
    assert answer.status_code == 304 and answer.content == b""
    assert answer.headers["etag"] == BIG_TAG


def test_if_none_match_naming_another_etag_downloads(client, big):
    answer = client.get(big, headers={"If-None-Match": '"' + "0" * 64 + '"'})
    assert answer.status_code == 200 and answer.content == BIG


@pytest.mark.parametrize(
    ("header", "start", "stop"),
    [
        ("bytes=0-0", 0, 1),
        ("bytes=10-99", 10, 100),
        (f"bytes={BLOB_CHUNK_BYTES - 5}-{BLOB_CHUNK_BYTES + 4}", BLOB_CHUNK_BYTES - 5, BLOB_CHUNK_BYTES + 5),
        (f"bytes={BLOB_CHUNK_BYTES - 1}-{2 * BLOB_CHUNK_BYTES}", BLOB_CHUNK_BYTES - 1, 2 * BLOB_CHUNK_BYTES + 1),
        (f"bytes={2 * BLOB_CHUNK_BYTES}-", 2 * BLOB_CHUNK_BYTES, len(BIG)),
        ("bytes=-100", len(BIG) - 100, len(BIG)),
        (f"bytes=-{10 * len(BIG)}", 0, len(BIG)),
        (f"bytes=5-{10 * len(BIG)}", 5, len(BIG)),
        (f"bytes={len(BIG) - 1}-", len(BIG) - 1, len(BIG)),
    ],
)
def test_a_range_is_206_with_exactly_those_bytes(client, big, header, start, stop):
    answer = client.get(big, headers={"Range": header})
    assert answer.status_code == 206, answer.text
    assert answer.content == BIG[start:stop]
    assert answer.headers["content-range"] == f"bytes {start}-{stop - 1}/{len(BIG)}"
    assert answer.headers["content-length"] == str(stop - start)
    assert answer.headers["etag"] == BIG_TAG


@pytest.mark.parametrize(
    "header",
    [
        f"bytes={len(BIG)}-",
        f"bytes={len(BIG) + 7}-{len(BIG) + 9}",
        "bytes=-0",
        "bytes=9-2",
        "bytes=x-y",
        "bytes=-",
        "bytes=",
    ],
)
def test_an_unsatisfiable_or_malformed_range_is_a_416_problem(client, big, header):
    answer = client.get(big, headers={"Range": header})
    assert answer.status_code == 416
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["content-range"] == f"bytes */{len(BIG)}"
    problem = answer.json()
    assert problem["status"] == 416
    assert [error["field"] for error in problem["errors"]] == ["Range"]
    assert problem["errors"][0]["limit"] == len(BIG)


@pytest.mark.parametrize("header", ["bytes=0-1, 5-9", "items=0-1"])
def test_several_ranges_or_another_unit_are_ignored(client, big, header):
    answer = client.get(big, headers={"Range": header})
    assert answer.status_code == 200 and answer.content == BIG


def test_if_range_serves_the_range_only_while_the_etag_matches(client, big):
    current = client.get(big, headers={"Range": "bytes=0-9", "If-Range": BIG_TAG})
    assert current.status_code == 206 and current.content == BIG[:10]
    changed = client.get(big, headers={"Range": "bytes=0-9", "If-Range": '"' + "0" * 64 + '"'})
    assert changed.status_code == 200 and changed.content == BIG


def test_an_empty_artifact_downloads_empty_and_has_no_range(client):
    job_id = finished_with(client, {"empty.json": ("application/json", b"")})
    url = f"/v1/jobs/{job_id}/artifacts/empty.json"
    answer = client.get(url)
    assert answer.status_code == 200 and answer.content == b"" and answer.headers["content-length"] == "0"
    assert answer.headers["etag"] == f'"{hashlib.sha256(b"").hexdigest()}"'
    assert client.get(url, headers={"Range": "bytes=0-"}).status_code == 416


def test_equal_artifacts_of_one_owner_share_one_blob_and_count_once(client):
    first = finished_with(client, {"a.npy": ("application/x-npy", BIG), "same.npy": ("application/x-npy", BIG)})
    second = finished_with(client, {"b.npy": ("application/x-npy", BIG), "small.json": ("application/json", b"{}")})
    assert count(client, Artifact) == 4 and count(client, Blob) == 2
    assert count(client, BlobChunk) == 3 + 1
    with client.app.state.sessions() as session:
        assert storage.usage(session, storage.job_owner(session, first)) == len(BIG) + 2
    for job_id, name in ((first, "a.npy"), (first, "same.npy"), (second, "b.npy")):
        assert client.get(f"/v1/jobs/{job_id}/artifacts/{name}").content == BIG
    listed = client.get(f"/v1/jobs/{second}/artifacts").json()["data"]
    assert [(entry["name"], entry["size"]) for entry in listed] == [("b.npy", len(BIG)), ("small.json", 2)]


def test_deleting_a_job_deletes_the_blobs_only_its_artifacts_used(client):
    first = finished_with(client, {"a.npy": ("application/x-npy", BIG), "own.json": ("application/json", b"[1]")})
    second = finished_with(client, {"b.npy": ("application/x-npy", BIG)})
    assert count(client, Blob) == 2
    assert client.delete(f"/v1/jobs/{first}").status_code == 204
    assert count(client, Blob) == 1 and count(client, BlobChunk) == 3, "the blob the other job uses stays"
    assert client.get(f"/v1/jobs/{second}/artifacts/b.npy").content == BIG
    assert client.delete(f"/v1/jobs/{second}").status_code == 204
    assert count(client, Blob) == 0 and count(client, BlobChunk) == 0


def test_a_new_attempt_deletes_the_blobs_of_the_earlier_attempts_artifacts(client):
    job_id = submit(client)["id"]
    store = JobStore(client.app.state.sessions)
    first = store.claim(job_id, worker="w0", device="cpu")
    store.finish(first, "failed", summary={"loss": 1.0}, artifacts={"a.npy": ("application/x-npy", BIG)})
    assert count(client, Blob) == 1
    with client.app.state.sessions.begin() as session:
        session.execute(update(Job).where(Job.id == job_id).values(status="queued"))
    assert store.claim(job_id, worker="w1", device="cpu").attempt == 2
    assert count(client, Artifact) == 0 and count(client, Blob) == 0 and count(client, BlobChunk) == 0


def test_an_artifact_whose_content_the_key_holds_fits_a_full_quota(client_with):
    """Only new content counts against max_stored_bytes_per_key: a second copy of stored bytes adds nothing."""
    client = client_with(max_stored_bytes_per_key=len(BIG) + 100)
    finished_with(client, {"a.npy": ("application/x-npy", BIG)})
    job_id = finished_with(
        client, {"again.npy": ("application/x-npy", BIG), "new.npy": ("application/x-npy", b"x" * 200)}
    )
    with client.app.state.sessions() as session:
        stored = set(session.scalars(select(Artifact.name).where(Artifact.job_id == job_id)))
    assert stored == {"again.npy"}
    summary = client.get(f"/v1/jobs/{job_id}").json()["summary"]
    assert summary["artifacts_skipped"].startswith("new.npy (200 bytes")
