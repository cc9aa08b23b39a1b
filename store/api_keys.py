"""API keys: make, find, list and revoke them. Only the SHA-256 of a secret is ever stored.

A secret is `ntk_` + 43 URL-safe characters (32 random bytes). The row keeps its hex
SHA-256 (looked up through a unique index) and a short display prefix; the secret itself
is shown once, when the key is made. A presented secret is hashed and the row is found
by that hash alone. No comparison ever touches the secret itself, and all a lookup's
timing could tell — how much of a stored digest a guess's digest shares — does not help to
build a secret of 32 random bytes, so there is no constant-time comparison left to make.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ntklab.store.models import ApiKey, new_id, utcnow

SECRET_PREFIX = "ntk_"
DISPLAY_CHARS = 12
MIN_SECRET_CHARS = 32


@dataclass(frozen=True)
class NewKey:
    key: ApiKey
    secret: str


def make_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(session: Session, name: str, *, is_admin: bool = False, secret: str | None = None) -> NewKey:
    """Store a new key (committed) and return it with its secret, which is not kept anywhere."""
    secret = secret or make_secret()
    key = ApiKey(
        id=new_id("key"),
        name=name,
        prefix=secret[:DISPLAY_CHARS],
        secret_hash=digest(secret),
        is_admin=is_admin,
        created_at=utcnow(),
    )
    session.add(key)
    session.commit()
    return NewKey(key, secret)


def find_active(session: Session, secret: str) -> ApiKey | None:
    """The unrevoked key whose secret this is, or None."""
    key = session.scalar(select(ApiKey).where(ApiKey.secret_hash == digest(secret)))
    if key is None or key.revoked_at is not None:
        return None
    return key


def list_keys(session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)))


def revoke(session: Session, key_id: str) -> bool:
    """Mark the key revoked (committed); False if there is no such unrevoked key."""
    revoked = session.execute(
        update(ApiKey).where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None)).values(revoked_at=utcnow())
    ).rowcount
    session.commit()
    return bool(revoked)


def ensure_admin(session: Session, secret: str, name: str = "bootstrap admin") -> ApiKey:
    """The key with this secret, made as an admin key if there is none; an existing key is left as it is
    (a key an operator revoked stays revoked)."""
    if not secret.startswith(SECRET_PREFIX) or len(secret) < MIN_SECRET_CHARS:
        raise ValueError(
            f"the bootstrap admin key must start with {SECRET_PREFIX!r} and have at least {MIN_SECRET_CHARS} characters"
        )
    key = session.scalar(select(ApiKey).where(ApiKey.secret_hash == digest(secret)))
    return key if key is not None else create_key(session, name, is_admin=True, secret=secret).key
