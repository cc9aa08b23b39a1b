"""A job artifact stored the way the worker's finish stores it (ntklab.store.artifacts_repo.add), without a worker."""

from __future__ import annotations

import hashlib

from sqlalchemy.orm import Session

from ntklab.store import artifacts_repo, storage
from ntklab.store.models import utcnow


def add_artifact(session: Session, job_id: str, name: str, media_type: str, data: bytes) -> None:
    """Store `data` as the job's artifact `name` in its owner's blobs, under the owner's storage lock; the caller commits."""
    owner = storage.job_owner(session, job_id)
    storage.lock_owner(session, owner)
    artifacts_repo.add(session, owner, job_id, name, media_type, data, hashlib.sha256(data).hexdigest(), utcnow())
