"""Uploads in SQL: content-addressed blobs in fixed-size chunks, and the data sets and ONNX models made of them.

A blob is stored once per (owner, SHA-256) as rows of `blob_chunks`, each at most
BLOB_CHUNK_BYTES, written from a file one chunk at a time (the upload is never held in
memory) and read back by workers on any host through the database. Data sets and models
are deduplicated the same way: the same owner uploading the same arrays (or ONNX file)
again gets the resource made the first time. Deleting the last data set or model that uses
a blob deletes the blob.

Reads are scoped like jobs (store/jobs_repo.py): a scope is an owner id, or None for the admin key.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from sqlalchemy import delete, exists, insert, or_, select
from sqlalchemy.orm import Session

from store import sweeps_repo
from store.models import Blob, BlobChunk, Dataset, Job, UploadedModel, new_id

BLOB_CHUNK_BYTES = 1 << 20
ACTIVE_STATUSES = ("queued", "running")

Upload = TypeVar("Upload", Dataset, UploadedModel)


def save_blob(session: Session, owner: str, sha256: str, size: int, path: Path) -> str:
    """The id of the owner's blob with this SHA-256, writing it from `path` chunk by chunk if it is new.

    Runs in the caller's transaction; two uploads of the same new bytes at once make one of
    the two commits fail on uq_blobs_owner_sha256 (the caller retries and finds the blob).
    """
    found = session.scalar(select(Blob.id).where(Blob.owner == owner, Blob.sha256 == sha256))
    if found is not None:
        return found
    blob_id = new_id("blob")
    chunks = -(-size // BLOB_CHUNK_BYTES)
    session.execute(insert(Blob).values(id=blob_id, owner=owner, sha256=sha256, size=size, chunks=chunks))
    with open(path, "rb") as source:
        for index in range(chunks):
            session.execute(insert(BlobChunk).values(blob_id=blob_id, chunk=index, data=source.read(BLOB_CHUNK_BYTES)))
    return blob_id


def read_blob(session: Session, blob_id: str) -> bytes:
    """A blob's bytes: its chunks concatenated in order."""
    rows = session.scalars(select(BlobChunk.data).where(BlobChunk.blob_id == blob_id).order_by(BlobChunk.chunk))
    return b"".join(rows)


def blob_hashes(session: Session, blob_ids: Iterable[str]) -> dict[str, str]:
    ids = list(set(blob_ids))
    if not ids:
        return {}
    return dict(session.execute(select(Blob.id, Blob.sha256).where(Blob.id.in_(ids))).all())


def visible(table: type[Upload], scope: str | None) -> tuple:
    return () if scope is None else (table.owner == scope,)


def get(session: Session, table: type[Upload], scope: str | None, upload_id: str) -> Upload | None:
    return session.scalar(select(table).where(*visible(table, scope), table.id == upload_id))


def list_page(
    session: Session, table: type[Upload], scope: str | None, limit: int, before_seq: int | None
) -> tuple[list[Upload], bool]:
    """Up to `limit` rows newest first, and whether more follow (cursor paging by seq, as for jobs)."""
    query = select(table).where(*visible(table, scope))
    if before_seq is not None:
        query = query.where(table.seq < before_seq)
    rows = list(session.scalars(query.order_by(table.seq.desc()).limit(limit + 1)))
    return rows[:limit], len(rows) > limit


def find_dataset(session: Session, owner: str, x_blob_id: str, y_blob_id: str) -> Dataset | None:
    return session.scalar(
        select(Dataset).where(Dataset.owner == owner, Dataset.x_blob_id == x_blob_id, Dataset.y_blob_id == y_blob_id)
    )


def find_model(session: Session, owner: str, blob_id: str) -> UploadedModel | None:
    return session.scalar(select(UploadedModel).where(UploadedModel.owner == owner, UploadedModel.blob_id == blob_id))


def active_jobs_using(session: Session, owner: str, spec_path: tuple[str, str], upload_id: str) -> list[str]:
    """Ids of the owner's queued or running jobs whose spec names `upload_id` at `spec_path` (("data", "id") or ("model", "id")),
    a sweep's jobs included (their specs are their sweep's base + a patch); at most 10."""
    own = list(session.scalars(
        select(Job.id)
        .where(Job.owner == owner, Job.status.in_(ACTIVE_STATUSES), Job.spec[spec_path].as_string() == upload_id)
        .order_by(Job.seq)
        .limit(10)
    ))
    return (own + sweeps_repo.active_jobs_using(session, owner, spec_path, upload_id))[:10]


def delete_upload(session: Session, row: Dataset | UploadedModel) -> None:
    """Delete a data set or model, and each of its blobs that nothing else uses; the caller commits."""
    blob_ids = [row.x_blob_id, row.y_blob_id] if isinstance(row, Dataset) else [row.blob_id]
    session.delete(row)
    session.flush()
    drop_unused_blobs(session, blob_ids)


def drop_unused_blobs(session: Session, blob_ids: Sequence[str]) -> None:
    used = or_(
        exists().where(or_(Dataset.x_blob_id == Blob.id, Dataset.y_blob_id == Blob.id)),
        exists().where(UploadedModel.blob_id == Blob.id),
    )
    session.execute(delete(Blob).where(Blob.id.in_(list(set(blob_ids))), ~used))
