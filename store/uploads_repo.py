"""Uploads in SQL: content-addressed blobs in fixed-size chunks, and the data sets and ONNX models made of them.

A blob is stored once per (owner, SHA-256) as rows of `blob_chunks`, each BLOB_CHUNK_BYTES
but the last, written from a file one chunk at a time (the upload is never held in memory),
read back by workers on any host through the database, and streamed out a byte range at a
time (`stream_blob`). Job artifacts are blobs too (store/artifacts_repo.py). Data sets and models
are deduplicated the same way: the same owner uploading the same arrays (or ONNX file)
again gets the resource made the first time. Deleting the last data set, model or artifact
that uses a blob deletes the blob.

Reads are scoped like jobs (store/jobs_repo.py): a scope is an owner id, or None for the admin key.

A submission and a delete naming the same upload serialise on its row, so whichever commits
second sees the first: the submission holds each upload its jobs name (`hold_for_jobs`, in the
transaction that inserts them) and the delete takes the row (`hold_for_delete`) before it looks
for jobs using it. On PostgreSQL these are row locks — `FOR KEY SHARE` (concurrent
submissions do not block each other) against `FOR UPDATE` — and in READ COMMITTED the
statements after the lock see what the other transaction committed: the delete then finds
the new job (409), the submission finds no row (422). SQLite has no row locks: both take the
database's write lock first (an UPDATE that changes no row; see store/owner_lock.py) and read
afterwards, so the second reads what the first committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, TypeVar

from sqlalchemy import delete, exists, false, insert, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from ntklab.store import storage, sweeps_repo
from ntklab.store.models import Artifact, Blob, BlobChunk, Dataset, Job, UploadedModel, new_id

BLOB_CHUNK_BYTES = 1 << 20
ACTIVE_STATUSES = ("queued", "running")

Upload = TypeVar("Upload", Dataset, UploadedModel)


class BlobGone(Exception):
    """The blob was deleted while it was being read."""


def save_blob(session: Session, owner: str, sha256: str, size: int, path: Path) -> str:
    """The id of the owner's blob with this SHA-256, writing it from the file at `path` if it is new (`save_blob_from`)."""
    with open(path, "rb") as source:
        return save_blob_from(session, owner, sha256, size, source)


def save_blob_from(session: Session, owner: str, sha256: str, size: int, source: BinaryIO) -> str:
    """The id of the owner's blob with this SHA-256, writing its `size` bytes from `source` chunk by chunk if it is new.

    Runs in the caller's transaction; two writers of the same new bytes at once make one of
    the two commits fail on uq_blobs_owner_sha256 (the caller retries and finds the blob), unless
    both hold the owner's storage lock (store/storage.py), as uploads and finishing jobs do.
    """
    found = session.scalar(select(Blob.id).where(Blob.owner == owner, Blob.sha256 == sha256))
    if found is not None:
        return found
    blob_id = new_id("blob")
    chunks = -(-size // BLOB_CHUNK_BYTES)
    session.execute(insert(Blob).values(id=blob_id, owner=owner, sha256=sha256, size=size, chunks=chunks))
    for index in range(chunks):
        session.execute(insert(BlobChunk).values(blob_id=blob_id, chunk=index, data=source.read(BLOB_CHUNK_BYTES)))
    return blob_id


def read_blob(session: Session, blob_id: str) -> bytes:
    """A blob's bytes: its chunks concatenated in order."""
    rows = session.scalars(select(BlobChunk.data).where(BlobChunk.blob_id == blob_id).order_by(BlobChunk.chunk))
    return b"".join(rows)


def stream_blob(sessions: sessionmaker[Session], blob_id: str, start: int, stop: int) -> Iterator[bytes]:
    """Bytes [start, stop) of a blob, one chunk's part at a time, each chunk read in a short session of its own.

    Chunk k holds bytes [k·C, (k+1)·C) with C = BLOB_CHUNK_BYTES, so the range lies in chunks
    start // C … (stop - 1) // C; at most one chunk is held at once, and no connection is kept
    between chunks (a slow reader holds none). Raises BlobGone if a chunk is missing.
    """
    for index in range(start // BLOB_CHUNK_BYTES, -(-stop // BLOB_CHUNK_BYTES)):
        with sessions() as session:
            data = session.scalar(select(BlobChunk.data).where(BlobChunk.blob_id == blob_id, BlobChunk.chunk == index))
        if data is None:
            raise BlobGone(blob_id)
        offset = index * BLOB_CHUNK_BYTES
        yield bytes(data[max(start - offset, 0) : stop - offset])


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
    own = list(
        session.scalars(
            select(Job.id)
            .where(Job.owner == owner, Job.status.in_(ACTIVE_STATUSES), Job.spec[spec_path].as_string() == upload_id)
            .order_by(Job.seq)
            .limit(10)
        )
    )
    return (own + sweeps_repo.active_jobs_using(session, owner, spec_path, upload_id))[:10]


def upload_uses(spec: dict) -> list[tuple[str, type[Dataset] | type[UploadedModel], str]]:
    """(field, table, id) of each upload a job spec document names: `data.id` of a data set, `model.id` of an ONNX model."""
    uses = []
    data, model = spec.get("data") or {}, spec.get("model") or {}
    if data.get("kind") == "dataset":
        uses.append(("data.id", Dataset, data["id"]))
    if model.get("kind") == "onnx":
        uses.append(("model.id", UploadedModel, model["id"]))
    return uses


def hold_for_jobs(session: Session, owner: str, specs: Iterable[dict]) -> list[tuple[str, str]]:
    """Hold each of the owner's uploads that these job specs name against deletion until the transaction ends
    (FOR KEY SHARE on PostgreSQL; SQLite's write lock), and return (field, id) of each that no longer exists.

    Call it in the transaction that inserts the jobs, before the insert: a delete that committed
    first is seen here (the upload is missing), and one that comes later waits for this commit
    and then finds the jobs (module docstring)."""
    wanted: dict[tuple[type, str], str] = {}
    for spec in specs:
        for field, table, upload_id in upload_uses(spec):
            wanted.setdefault((table, upload_id), field)
    if not wanted:
        return []
    _write_lock_on_sqlite(session)
    missing = []
    for table in (Dataset, UploadedModel):
        ids = sorted(upload_id for kind, upload_id in wanted if kind is table)
        if not ids:
            continue
        found = set(
            session.scalars(
                select(table.id)
                .where(table.owner == owner, table.id.in_(ids))
                .order_by(table.id)
                .with_for_update(read=True, key_share=True)
            )
        )
        missing += [(wanted[(table, upload_id)], upload_id) for upload_id in ids if upload_id not in found]
    return missing


def hold_for_delete(session: Session, row: Upload) -> Upload | None:
    """The row read again and held against submissions until the transaction ends (FOR UPDATE on PostgreSQL;
    SQLite's write lock), or None if it was deleted meanwhile. Call it before looking for jobs that use it."""
    _write_lock_on_sqlite(session)
    table = type(row)
    return session.scalar(
        select(table).where(table.id == row.id).with_for_update().execution_options(populate_existing=True)
    )


def _write_lock_on_sqlite(session: Session) -> None:
    """On SQLite, begin the write transaction now (an UPDATE that changes no row), so what is read next is the
    latest commit and no other writer commits before this transaction ends; held until commit or rollback."""
    if session.get_bind().dialect.name == "sqlite":
        session.execute(update(Dataset).where(false()).values(seq=Dataset.seq))


def delete_upload(session: Session, row: Dataset | UploadedModel) -> None:
    """Delete a data set or model, and each of its blobs that nothing else uses; the caller commits.
    Under the owner's storage lock, as a worker storing an artifact is: a blob of the same content is either
    seen in use here or looked up by the worker after this commit, never both missed."""
    storage.lock_owner(session, row.owner)
    blob_ids = [row.x_blob_id, row.y_blob_id] if isinstance(row, Dataset) else [row.blob_id]
    session.delete(row)
    session.flush()
    drop_unused_blobs(session, blob_ids)


def drop_unused_blobs(session: Session, blob_ids: Sequence[str]) -> None:
    """Delete those of these blobs that no data set, model or artifact uses."""
    used = or_(
        exists().where(or_(Dataset.x_blob_id == Blob.id, Dataset.y_blob_id == Blob.id)),
        exists().where(UploadedModel.blob_id == Blob.id),
        exists().where(Artifact.blob_id == Blob.id),
    )
    session.execute(delete(Blob).where(Blob.id.in_(list(set(blob_ids))), ~used))
