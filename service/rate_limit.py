"""Requests per second per caller: a moving one-second window (the `limits` library) → 429 + Retry-After.

At most `rate_limit_per_s` requests of one caller are accepted in any one-second window;
the next is refused until the oldest of them leaves the window. The window lives in this
process (memory) for the embedded default, and in Redis when the broker is Redis, so all
API processes on one Redis share each key's window (the library keeps a list per key and
trims and counts it atomically in a Lua script). If Redis cannot be reached the request
is let through and a warning logged: the limiter protects the service, it must not stop it.
"""

from __future__ import annotations

import logging
import math
import time

from limits import RateLimitItemPerSecond
from limits.storage import RedisStorage, Storage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

from api_schemas import problems as types
from api_schemas.problems import FieldError
from service.problems import ProblemError
from service.settings import Settings

log = logging.getLogger(__name__)

REDIS_TIMEOUT_S = 0.5
KEY_PREFIX = "ntklab-rate"


class RateLimiter:
    """`check(owner)` raises a 429 problem when `owner` is over its rate; `per_s = 0` never does."""

    def __init__(self, per_s: int, storage: Storage, namespace: str):
        self.item = RateLimitItemPerSecond(max(per_s, 1), 1)
        self.enabled = per_s > 0
        self.limiter = MovingWindowRateLimiter(storage)
        self.namespace = namespace

    def check(self, owner: str) -> None:
        if not self.enabled:
            return
        try:
            allowed = self.limiter.hit(self.item, self.namespace, owner)
            reset_at = None if allowed else self.limiter.get_window_stats(self.item, self.namespace, owner).reset_time
        except Exception as error:  # any storage failure: let the request through
            log.warning("rate limiter storage unavailable, request allowed: %s", error)
            return
        if not allowed:
            raise _too_many(self.item.amount, retry_after_s(reset_at))


def make_rate_limiter(settings: Settings) -> RateLimiter:
    return RateLimiter(settings.rate_limit_per_s, storage_for(settings.broker_url), settings.queue)


def storage_for(broker_url: str) -> Storage:
    """Redis (the broker's server) when the broker is Redis, else this process's memory."""
    if _scheme(broker_url) in RedisStorage.STORAGE_SCHEME:
        return storage_from_string(
            broker_url, key_prefix=KEY_PREFIX, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
        )
    return storage_from_string("memory://")


def _scheme(url: str) -> str:
    return url.partition("://")[0].lower()


def retry_after_s(reset_at: float, now: float | None = None) -> int:
    """Whole seconds until the window frees a slot, at least 1."""
    return max(1, math.ceil(reset_at - (time.time() if now is None else now)))


def _too_many(limit: int, retry_after: int) -> ProblemError:
    message = f"more than {limit} requests in one second with this key (setting rate_limit_per_s)"
    return ProblemError(
        429, message + f"; retry after {retry_after} s", type=types.RATE_LIMITED, title="Too many requests",
        errors=[FieldError(field="requests_per_second", message=message, limit=limit)],
        headers={"Retry-After": str(retry_after)},
    )
