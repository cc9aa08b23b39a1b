"""0017 moves the bytes of artifacts stored at 0014 into content-addressed blobs, and its downgrade moves them back."""

from __future__ import annotations

import hashlib
import os

import pytest
from alembic import command
from sqlalchemy import inspect, text

from ntklab.store.db import make_engine
from tests.service.test_migrations import BACKENDS, insert_kept_job, schema_differences

CHUNK = 1 << 20
BIG = os.urandom(2 * CHUNK + 777)
UPLOADED = b"bytes alice also uploaded as a model"
ARTIFACTS = {  # id: (job, name, bytes)
    1: ("job_kept", "kernel.npy", BIG),
    2: ("job_kept", "copy.npy", BIG),
    3: ("job_kept", "empty.json", b""),
    4: ("job_kept", "model.onnx", UPLOADED),
    5: ("job_bob", "kernel.npy", BIG),
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stored_at_0014(connection) -> None:
    """Alice's job and Bob's, their artifacts (rows with bytes) and a model Alice uploaded (a blob of one chunk)."""
    insert_kept_job(connection, "succeeded", attempts=1, step=5)
    connection.execute(
        text(
            "INSERT INTO jobs (id, owner, spec, spec_hash, parameters, status, cancel_requested, attempts, progress_step, "
            "progress_total, progress_phase, created_at) VALUES "
            "('job_bob', 'bob', '{}', 'h', 1, 'succeeded', false, 1, 1, 1, 'succeeded', '2026-01-01')"
        )
    )
    for artifact_id, (job_id, name, data) in ARTIFACTS.items():
        connection.execute(
            text(
                "INSERT INTO artifacts (id, job_id, name, media_type, size, data, created_at) "
                "VALUES (:id, :job, :name, 'application/octet-stream', :size, :data, '2026-01-02')"
            ),
            {"id": artifact_id, "job": job_id, "name": name, "size": len(data), "data": data},
        )
    connection.execute(
        text(
            "INSERT INTO blobs (id, owner, sha256, size, chunks, created_at) VALUES ('blob_up', 'alice', :sha, :size, 1, '2026-01-01')"
        ),
        {"sha": sha(UPLOADED), "size": len(UPLOADED)},
    )
    connection.execute(
        text("INSERT INTO blob_chunks (blob_id, chunk, data) VALUES ('blob_up', 0, :data)"), {"data": UPLOADED}
    )
    connection.execute(
        text(
            "INSERT INTO models (id, owner, name, blob_id, format, parameters, inputs, outputs, operators, opset, size, created_at) "
            "VALUES ('mdl_1', 'alice', 'm', 'blob_up', 'onnx', 2, '[]', '[]', '[\"Gemm\"]', 17, :size, '2026-01-01')"
        ),
        {"size": len(UPLOADED)},
    )


def blob_bytes(connection, blob_id: str) -> bytes:
    return b"".join(
        connection.execute(
            text("SELECT data FROM blob_chunks WHERE blob_id = :id ORDER BY chunk"), {"id": blob_id}
        ).scalars()
    )


@pytest.mark.parametrize("fresh_database", BACKENDS, indirect=True)
def test_0017_moves_artifact_bytes_into_shared_blobs_and_back(fresh_database, alembic_for):
    _, url = fresh_database
    command.upgrade(alembic_for(url), "0014")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            stored_at_0014(connection)

        command.upgrade(alembic_for(url), "0017")
        with engine.connect() as connection:
            assert "data" not in {column["name"] for column in inspect(connection).get_columns("artifacts")}
            named = dict(connection.execute(text("SELECT id, blob_id FROM artifacts")).all())
            blobs = {
                row.id: row for row in connection.execute(text("SELECT id, owner, sha256, size, chunks FROM blobs"))
            }
            for artifact_id, (job_id, _, data) in ARTIFACTS.items():
                blob = blobs[named[artifact_id]]
                assert (blob.owner, blob.sha256, blob.size) == (
                    "bob" if job_id == "job_bob" else "alice",
                    sha(data),
                    len(data),
                )
                assert blob.chunks == -(-len(data) // CHUNK)
                assert blob_bytes(connection, blob.id) == data
            assert named[1] == named[2], "one copy of Alice's two equal artifacts"
            assert named[4] == "blob_up", "an artifact equal to an upload shares its blob"
            assert named[5] != named[1], "Bob's copy is Bob's own blob"
            assert len(blobs) == 4  # Alice: BIG, empty, the upload; Bob: BIG
            chunk_sizes = (
                connection.execute(
                    text("SELECT length(data) FROM blob_chunks WHERE blob_id = :id ORDER BY chunk"), {"id": named[1]}
                )
                .scalars()
                .all()
            )
            assert chunk_sizes == [CHUNK, CHUNK, 777]

        command.downgrade(alembic_for(url), "0014")
        with engine.connect() as connection:
            assert "blob_id" not in {column["name"] for column in inspect(connection).get_columns("artifacts")}
            back = {
                row.id: (row.job_id, row.name, bytes(row.data), row.size)
                for row in connection.execute(text("SELECT id, job_id, name, data, size FROM artifacts"))
            }
            assert back == {artifact_id: (*entry, len(entry[2])) for artifact_id, entry in ARTIFACTS.items()}
            left = connection.execute(text("SELECT id FROM blobs")).scalars().all()
            assert left == ["blob_up"], "the blobs only artifacts used are gone; the upload's stays"
            assert blob_bytes(connection, "blob_up") == UPLOADED
            assert connection.execute(text("SELECT count(*) FROM blob_chunks")).scalar() == 1

        command.upgrade(alembic_for(url), "head")
        assert schema_differences(url) == []
    finally:
        engine.dispose()
