"""The storage quota of uploads: a key's stored bytes stay at or below `max_stored_bytes_per_key`.

Usage is counted from the database (store/storage.py: the key's blobs and its jobs'
artifacts). An upload is checked twice:

- before its body is read (`refuse_if_full`): a key already at or over its quota is refused
  at once, so its bytes never reach the temporary disk; a short session of its own, closed
  before the body is read;
- when it is stored (`reserve`), in the transaction that writes it and under the key's
  storage lock: usage + the bytes it adds (contents the key does not hold yet) must fit.
  Concurrent uploads of one key serialise here, so together they never pass the quota.

Both refusals are 413 `storage-quota`, field `stored_bytes`, with `limit` the quota and
`value` the key's usage. Job artifacts are held to the same quota when the worker stores
them (store/job_store.py): one that does not fit is skipped and named in the summary.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.orm import Session, sessionmaker

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import FieldError
from ntklab.config.settings import Settings
from ntklab.service.problems import ProblemError
from ntklab.store import storage


def reserve(session: Session, owner: str, contents: Iterable[tuple[str, int]], settings: Settings) -> None:
    """Take the owner's storage lock (held until the caller commits) and refuse with 413 if these
    (SHA-256, size) contents would take its usage past the quota."""
    storage.lock_owner(session, owner)
    adding = storage.new_bytes(session, owner, contents)
    used = storage.usage(session, owner)
    if adding and used + adding > settings.max_stored_bytes_per_key:
        session.rollback()
        raise over_quota(used, adding, settings.max_stored_bytes_per_key)


def refuse_if_full(sessions: sessionmaker[Session], owner: str, settings: Settings) -> None:
    """413 when the owner already stores its whole quota (nothing locked: `reserve` decides at storage)."""
    with sessions() as session:
        used = storage.usage(session, owner)
    if used >= settings.max_stored_bytes_per_key:
        raise over_quota(used, None, settings.max_stored_bytes_per_key, headers={"Connection": "close"})


def over_quota(used: int, adding: int | None, limit: int, headers: dict[str, str] | None = None) -> ProblemError:
    adds = "" if adding is None else f" and this upload adds {adding}"
    message = (
        f"this key stores {used} bytes (data sets, models and job artifacts){adds}; the quota is {limit} "
        "bytes per key (setting max_stored_bytes_per_key)"
    )
    return ProblemError(
        413,
        message + "; delete data sets, models or finished jobs to make room",
        type=types.STORAGE_QUOTA,
        title="Storage quota exceeded",
        errors=[FieldError(field="stored_bytes", message=message, limit=limit, value=used)],
        headers=headers,
    )
