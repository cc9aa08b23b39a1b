"""Who is calling: the API key of the request (`X-API-Key: ntk_…` or `Authorization: Bearer ntk_…`).

With `auth = off` every request is the `anonymous` owner, as in the embedded default. With
`auth = on` a request without a key, with an unknown key or with a revoked key is a 401
problem carrying `WWW-Authenticate`. A caller owns what it creates (owner = its key id);
it reads only its own rows, except the admin key, which reads everyone's.

Each API process remembers a key it found valid for `auth_cache_s` (default 5 s), keyed
by the secret's digest, so a client polling a job costs one database lookup of its key
every few seconds instead of one per request. The price: a revoked key keeps working for
up to `auth_cache_s` in each process. Unknown keys are never remembered, so a new key
works at once.

Failed checks are counted per client address: after `auth_failures_per_minute` of them in
a minute, keys that address presents are refused with a 429 without a database lookup
(keys it already had remembered still work), so guessing keys or flooding the API with
bad ones costs the database nothing.

A lookup runs in a short session of its own (an autocommit one: no transaction), closed —
its connection back in the pool — before the route starts; the request's body, which may
still be arriving, is read only after that. So no request waits on its client while it
holds a database connection (service/uploads.py, service/body_timing.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import TTLCache
from sqlalchemy.orm import Session
from starlette.datastructures import Headers

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import Problem
from ntklab.config.settings import Settings
from ntklab.service.clock import Clock
from ntklab.service.problems import ProblemError
from ntklab.service.rate_limit import RateLimiter
from ntklab.store import api_keys
from ntklab.store.models import ANONYMOUS

KEY_HEADER = "X-API-Key"
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ntklab"'}
_PROBLEM = {"model": Problem, "content": {types.PROBLEM_MEDIA_TYPE: {}}}
RESPONSES = {
    401: {**_PROBLEM, "description": "auth is on and the API key is missing, unknown or revoked"},
    429: {
        **_PROBLEM,
        "description": "more requests per second than rate_limit_per_s with this key, or more failed key "
        "checks from this address than auth_failures_per_minute; Retry-After",
    },
}


@dataclass(frozen=True)
class Caller:
    owner: str
    is_admin: bool = False

    @property
    def scope(self) -> str | None:
        """The owner whose rows this caller reads; None for the admin, who reads all."""
        return None if self.is_admin else self.owner


ANONYMOUS_CALLER = Caller(owner=ANONYMOUS)


MAX_REMEMBERED_KEYS = 10_000


class KeyCache:
    """Valid keys' callers by the digest of their secret, each kept `ttl_s` seconds of `clock` (thread-safe)."""

    def __init__(self, ttl_s: float, clock: Clock = time.monotonic):
        self._callers: TTLCache[str, Caller] | None = (
            TTLCache(MAX_REMEMBERED_KEYS, ttl_s, timer=clock) if ttl_s > 0 else None
        )
        self._lock = threading.Lock()

    def get(self, digest: str) -> Caller | None:
        if self._callers is None:
            return None
        with self._lock:
            return self._callers.get(digest)

    def put(self, digest: str, caller: Caller) -> None:
        if self._callers is not None:
            with self._lock:
                self._callers[digest] = caller


def authenticate(
    settings: Settings,
    headers: Headers,
    sessions: Callable[[], Session],
    cache: KeyCache,
    failures: RateLimiter,
    address: str,
) -> Caller:
    """The caller of a request from `address`; a key not remembered is looked up, in a session
    of `sessions` closed before this returns, unless that address has used up its failed checks
    (429), and a failed check counts against it."""
    if settings.auth == "off":
        return ANONYMOUS_CALLER
    secret = presented_secret(headers)
    if secret is None:
        raise _unauthorized(f"send an API key in the {KEY_HEADER} header or as Authorization: Bearer <key>")
    digest = api_keys.digest(secret)
    if (caller := cache.get(digest)) is not None:
        return caller
    failures.refuse_if_over(address)
    with sessions() as session:
        key = api_keys.find_active(session, secret)
        caller = None if key is None else Caller(owner=key.id, is_admin=key.is_admin)
    if caller is None:
        failures.check(address)
        raise _unauthorized("the API key is unknown or revoked")
    cache.put(digest, caller)
    return caller


def presented_secret(headers: Headers) -> str | None:
    """The key from X-API-Key, else from `Authorization: Bearer`; None if neither is there."""
    if secret := headers.get(KEY_HEADER, "").strip():
        return secret
    scheme, _, credentials = headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return None


def _unauthorized(detail: str) -> ProblemError:
    return ProblemError(401, detail, type=types.UNAUTHORIZED, title="Unauthorized", headers=CHALLENGE)
