"""Job artifacts in SQL: each is a name for one of the job owner's content-addressed blobs (store/uploads_repo.py).

An artifact's bytes are written once per (owner, SHA-256), in BLOB_CHUNK_BYTES chunks, through
the same `save_blob_from` as uploads: a kernel a job produces again, or one equal to an
uploaded file, adds no bytes. Its SHA-256 is its ETag. Writers hold the owner's storage lock
(store/storage.py) from before they look for an existing blob until they commit, so one that
deletes artifacts (a new attempt, a deleted job) and drops the blobs nothing uses any more
never races one that reuses such a blob.
"""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import dataclass

from sqlalchemy import delete, exists, insert, select
from sqlalchemy.orm import Session

from ntklab.store import storage, uploads_repo
from ntklab.store.models import Artifact, Blob


@dataclass(frozen=True)
class ArtifactEntry:
    """What listing and downloading need of an artifact; `sha256` is its content's, `created_at` in UTC."""

    name: str
    media_type: str
    size: int
    created_at: dt.datetime
    blob_id: str
    sha256: str


def entries(session: Session, job_id: str, name: str | None = None) -> list[ArtifactEntry]:
    """The job's artifacts by name (only the one whose stored name equals `name` exactly, when given)."""
    query = (
        select(Artifact.name, Artifact.media_type, Artifact.size, Artifact.created_at, Artifact.blob_id, Blob.sha256)
        .join(Blob, Blob.id == Artifact.blob_id)
        .where(Artifact.job_id == job_id)
    )
    if name is not None:
        query = query.where(Artifact.name == name)
    return [
        ArtifactEntry(row.name, row.media_type, row.size, _as_utc(row.created_at), row.blob_id, row.sha256)
        for row in session.execute(query.order_by(Artifact.name))
    ]


def find(session: Session, job_id: str, name: str) -> ArtifactEntry | None:
    found = entries(session, job_id, name)
    return found[0] if found else None


def add(
    session: Session,
    owner: str,
    job_id: str,
    name: str,
    media_type: str,
    data: bytes,
    sha256: str,
    created_at: dt.datetime,
) -> None:
    """Store `data` (whose SHA-256 is `sha256`) as the job's artifact `name`, its bytes in the owner's blob of that
    content, written if new. The caller holds the owner's storage lock (`storage.lock_owner`) and commits."""
    blob_id = uploads_repo.save_blob_from(session, owner, sha256, len(data), io.BytesIO(data))
    session.execute(
        insert(Artifact).values(
            job_id=job_id, name=name, media_type=media_type, size=len(data), blob_id=blob_id, created_at=created_at
        )
    )


def delete_all(session: Session, job_id: str) -> None:
    """Delete the job's artifacts and the blobs only they used, under the owner's storage lock (taken only when
    the job has artifacts); the caller commits. Call it before deleting the job row (whose delete cascades)."""
    if session.scalar(select(exists().where(Artifact.job_id == job_id))):
        storage.lock_owner(session, storage.job_owner(session, job_id))
        blob_ids = list(session.scalars(delete(Artifact).where(Artifact.job_id == job_id).returning(Artifact.blob_id)))
        uploads_repo.drop_unused_blobs(session, blob_ids)


def _as_utc(moment: dt.datetime) -> dt.datetime:
    """Times are stored in UTC; SQLite hands them back without a zone, PostgreSQL with one."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)
