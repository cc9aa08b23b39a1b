"""Moving-window limits (the `limits` library) → 429 + Retry-After.

Two windows: at most `rate_limit_per_s` requests of one key in any one second (the next
is refused until the oldest leaves the window), and at most `auth_failures_per_minute`
failed key checks from one client address in any minute (service/api/auth.py: past it,
keys that address presents are not looked up until the window frees a slot). The window lives in this
process (memory) for the embedded default, and in Redis when the broker is Redis, so all
API processes on one Redis share each key's window (the library keeps a list per key and
trims and counts it atomically in a Lua script). If Redis cannot be reached the request
is let through and a warning logged: the limiter protects the service, it must not stop it.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from limits import RateLimitItem, RateLimitItemPerMinute, RateLimitItemPerSecond
from limits.storage import RedisStorage, Storage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import FieldError
from ntklab.config.settings import Settings
from ntklab.service.clock import Clock
from ntklab.service.problems import ProblemError

log = logging.getLogger(__name__)

REDIS_TIMEOUT_S = 0.5
KEY_PREFIX = "ntklab-rate"


@dataclass(frozen=True)
class Window:
    """A limit and how its 429 names it: `amount` `what` (setting `setting`), FieldError `field`."""

    item: RateLimitItem
    enabled: bool
    what: str
    field: str
    setting: str


def requests_per_second(per_s: int) -> Window:
    return Window(
        RateLimitItemPerSecond(max(per_s, 1), 1),
        per_s > 0,
        "requests in one second with this key",
        "requests_per_second",
        "rate_limit_per_s",
    )


def auth_failures_per_minute(per_minute: int) -> Window:
    return Window(
        RateLimitItemPerMinute(max(per_minute, 1), 1),
        per_minute > 0,
        "failed API key checks in one minute from this address",
        "auth_failures_per_minute",
        "auth_failures_per_minute",
    )


class RateLimiter:
    """Counts hits of one window per identity (a key, an address); a disabled window never refuses.

    The window's own time is its storage's (`limits` stamps hits with the wall time of the process);
    `clock`, wall seconds, is what the Retry-After is counted from.
    """

    def __init__(self, window: Window, storage: Storage, namespace: str, clock: Clock = time.time):
        self.window = window
        self.limiter = MovingWindowRateLimiter(storage)
        self.namespace = f"{namespace}:{window.field}"
        self.clock = clock

    def check(self, identity: str) -> None:
        """Count a hit; raise the 429 problem if it is over the limit."""
        self._guarded(lambda: self.limiter.hit(self.window.item, self.namespace, identity), identity)

    def refuse_if_over(self, identity: str) -> None:
        """Raise the 429 problem if the window is full, without counting a hit."""
        self._guarded(lambda: self.limiter.test(self.window.item, self.namespace, identity), identity)

    def _guarded(self, allowed_now, identity: str) -> None:
        if not self.window.enabled:
            return
        try:
            allowed = allowed_now()
            reset_at = (
                None
                if allowed
                else self.limiter.get_window_stats(self.window.item, self.namespace, identity).reset_time
            )
        except Exception as error:  # any storage failure: let the request through
            log.warning("rate limiter storage unavailable, request allowed: %s", error)
            return
        if not allowed:
            raise _too_many(self.window, retry_after_s(reset_at, self.clock()))


def make_limiters(settings: Settings) -> tuple[RateLimiter, RateLimiter]:
    """(requests per second per key, failed key checks per minute per address), sharing one storage."""
    storage = storage_for(settings.broker_url)
    return (
        RateLimiter(requests_per_second(settings.rate_limit_per_s), storage, settings.queue),
        RateLimiter(auth_failures_per_minute(settings.auth_failures_per_minute), storage, settings.queue),
    )


def storage_for(broker_url: str) -> Storage:
    """Redis (the broker's server) when the broker is Redis, else this process's memory."""
    if _scheme(broker_url) in RedisStorage.STORAGE_SCHEME:
        return storage_from_string(
            broker_url, key_prefix=KEY_PREFIX, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
        )
    return storage_from_string("memory://")


def _scheme(url: str) -> str:
    return url.partition("://")[0].lower()


def retry_after_s(reset_at: float, now: float) -> int:
    """Whole seconds from `now` until the window frees a slot at `reset_at` (wall seconds), at least 1."""
    return max(1, math.ceil(reset_at - now))


def _too_many(window: Window, retry_after: int) -> ProblemError:
    limit = window.item.amount
    message = f"more than {limit} {window.what} (setting {window.setting})"
    return ProblemError(
        429,
        message + f"; retry after {retry_after} s",
        type=types.RATE_LIMITED,
        title="Too many requests",
        errors=[FieldError(field=window.field, message=message, limit=limit)],
        headers={"Retry-After": str(retry_after)},
    )
