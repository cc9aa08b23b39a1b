"""One owner's submission lock: two submissions of one owner count its active jobs and insert theirs one after the other.

On PostgreSQL a transaction-scoped advisory lock (released by the commit, shared by every API process); on SQLite
the database's write lock, taken up front by an UPDATE that changes no row and held until the commit (so API
processes on one file serialise their submissions), behind a lock in this process (so this process's threads
queue in memory rather than in SQLite's busy handler). service/quota.py counts and refuses under it.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator

from sqlalchemy import false, func, select, update
from sqlalchemy.orm import Session

from ntklab.store.models import Job

_PROCESS_LOCK = threading.Lock()


@contextlib.contextmanager
def owner_lock(session: Session, owner: str) -> Iterator[None]:
    """Hold `owner`'s lock in the session's transaction for the block (whose commit releases it on PostgreSQL)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(advisory_key(owner))))
        yield
        return
    with _PROCESS_LOCK:
        session.execute(update(Job).where(false()).values(seq=Job.seq))
        yield


def advisory_key(owner: str) -> int:
    """A signed 64-bit number naming the owner's quota lock (PostgreSQL advisory locks take a bigint)."""
    return int.from_bytes(hashlib.sha256(f"ntklab-quota:{owner}".encode()).digest()[:8], "big", signed=True)
