"""Deleting an upload while a worker stores an artifact of the same content (one blob per owner and content).

The upload's delete drops its blob when nothing else uses it; the worker's finish looks the blob up by its
SHA-256 and points the new artifact at it. Both take the owner's storage lock (store/storage.py), so one
waits for the other: the artifact either finds the blob gone and writes its own, or is seen by the delete,
which then keeps the blob. Without the delete's lock, the worker saw the blob the delete had just removed
(uncommitted) and its artifact failed on the foreign key when the delete committed. PostgreSQL only: SQLite
has one writer at a time, so the two never interleave there."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
from sqlalchemy import select

from ntklab.store import artifacts_repo, storage, uploads_repo
from ntklab.store.models import Artifact, Blob, UploadedModel, utcnow
from tests.service.test_jobs_api import submit
from tests.upload_files import mlp_onnx, mlp_weights


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_an_artifact_stored_while_its_content_upload_is_deleted_keeps_its_bytes(client):
    onnx_bytes = mlp_onnx(weights=mlp_weights())
    answer = client.post("/v1/models", files={"file": ("m.onnx", onnx_bytes, "application/octet-stream")})
    assert answer.status_code == 201, answer.text
    job_id = submit(client)["id"]
    sessions = client.app.state.sessions
    outcome: dict[str, object] = {}

    def store_artifact() -> None:
        try:
            with sessions() as session:
                owner = storage.job_owner(session, job_id)
                storage.lock_owner(session, owner)
                sha = hashlib.sha256(onnx_bytes).hexdigest()
                artifacts_repo.add(
                    session, owner, job_id, "same.onnx", "application/octet-stream", onnx_bytes, sha, utcnow()
                )
                session.commit()
            outcome["stored"] = True
        except Exception as exc:  # the failure the test is about, reported in the main thread
            outcome["error"] = exc

    with sessions() as deleting:
        row = deleting.scalar(select(UploadedModel).where(UploadedModel.id == answer.json()["id"]))
        uploads_repo.delete_upload(deleting, row)
        worker = threading.Thread(target=store_artifact)
        worker.start()
        time.sleep(0.5)  # the worker reaches the blob lookup (unfixed) or waits on the owner's lock (fixed)
        deleting.commit()
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert outcome == {"stored": True}, outcome
    with sessions() as session:
        blob_id = session.scalar(select(Artifact.blob_id).where(Artifact.job_id == job_id))
        assert session.get(Blob, blob_id) is not None
    assert client.get(f"/v1/jobs/{job_id}/artifacts/same.onnx").content == onnx_bytes
