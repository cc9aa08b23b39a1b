"""Stored bytes per key, and the lock that keeps a key's usage under its quota (`max_stored_bytes_per_key`).

A key's usage is what its rows hold in the database:

    usage(owner) = Σ blobs.size of the owner's blobs   (data sets, models and its jobs' artifacts; each content once)

An upload or a job's artifact adds only the blobs the owner does not hold yet (`new_bytes`), so
storing the same bytes again adds nothing. Counting and writing run under a per-owner lock, so two
uploads of one key (or an upload and a finishing job) never both count before either
commits: on PostgreSQL a transaction-scoped advisory lock (its own key, not the active-jobs
quota's); on SQLite the database's write lock, taken by an UPDATE that changes no row and
held until the commit (as in store/owner_lock.py). Both are released by the commit or rollback.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from sqlalchemy import false, func, select, update
from sqlalchemy.orm import Session

from ntklab.store.models import Blob, Job


def lock_owner(session: Session, owner: str) -> None:
    """Hold the owner's storage lock until the session's transaction ends."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(advisory_key(owner))))
    else:
        session.execute(update(Blob).where(false()).values(size=Blob.size))


def advisory_key(owner: str) -> int:
    """A signed 64-bit number naming the owner's storage lock (PostgreSQL advisory locks take a bigint)."""
    return int.from_bytes(hashlib.sha256(f"ntklab-storage:{owner}".encode()).digest()[:8], "big", signed=True)


def usage(session: Session, owner: str) -> int:
    """Bytes the owner stores: its blobs (its uploads' and its jobs' artifacts')."""
    return int(session.scalar(select(func.coalesce(func.sum(Blob.size), 0)).where(Blob.owner == owner)))


def new_bytes(session: Session, owner: str, contents: Iterable[tuple[str, int]]) -> int:
    """Bytes that storing these (SHA-256, size) contents adds: those the owner does not hold yet, each once."""
    wanted = dict(contents)
    if not wanted:
        return 0
    held = set(session.scalars(select(Blob.sha256).where(Blob.owner == owner, Blob.sha256.in_(list(wanted)))))
    return sum(size for sha256, size in wanted.items() if sha256 not in held)


def job_owner(session: Session, job_id: str) -> str | None:
    return session.scalar(select(Job.owner).where(Job.id == job_id))
