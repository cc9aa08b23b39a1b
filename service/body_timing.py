"""Request bodies must keep arriving: a minimum rate after a grace period, and a total deadline.

`BodyDeadline` (ASGI middleware, outside every other reader of the body) times each read of
a request's body. The clock starts when the app first asks for a body message; from then on

    bytes received by t  ≥  body_min_rate_bytes_per_s × (t − body_grace_s)      (rate)
    t                    ≤  upload_deadline_s (POST /v1/datasets, /v1/models)   (deadline)
                            body_deadline_s   (every other request)

and a read that would have to wait past either is abandoned: the request is answered 408
`urn:ntklab:problem:body-timeout`, its FieldError names `body` with the limit it broke
(bytes per second, or seconds) and the detail names the setting, and the connection is
closed (`Connection: close`). Once the last body message has arrived, reads are not timed
(a response may wait for the client's disconnect). The rate is an average from the start,
the rule of Apache's mod_reqtimeout: each `rate` bytes buy one more second.

A stalled client therefore holds, for at most `body_grace_s` plus what its bytes bought,
only its socket and a task; never a database connection (authentication closes its session
before the body is read, uploads open theirs after it is on disk) or a thread.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import FieldError
from ntklab.config.settings import Settings
from ntklab.service.problems import ProblemError, problem_response


@dataclass(frozen=True)
class BodyPace:
    """How fast a body must arrive: at least `min_rate` bytes/s after `grace_s`, all of it within `deadline_s`."""

    deadline_s: float
    deadline_setting: str
    min_rate: int
    grace_s: float


class BodyTimeout(ProblemError):
    """The body did not arrive in time: 408, connection closed."""

    def __init__(self, message: str, limit: float, value: float) -> None:
        super().__init__(
            408,
            message,
            type=types.BODY_TIMEOUT,
            title="Request body too slow",
            errors=[FieldError(field="body", message=message, limit=limit, value=value)],
            headers={"Connection": "close"},
        )


class BodyClock:
    """Times the body messages of one request against a BodyPace."""

    def __init__(self, pace: BodyPace, receive, now: Callable[[], float] = time.monotonic) -> None:
        self.pace = pace
        self._receive = receive
        self._now = now
        self.started: float | None = None
        self.received = 0
        self.done = False

    async def receive(self) -> dict:
        if self.done:
            return await self._receive()
        now = self._now()
        if self.started is None:
            self.started = now
        wait_s, broken = self._allowance(now)
        if wait_s <= 0:
            raise self._timeout(broken, now)
        try:
            with anyio.fail_after(wait_s):
                message = await self._receive()
        except TimeoutError:
            raise self._timeout(broken, self._now()) from None
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            self.done = not message.get("more_body", False)
        else:
            self.done = True
        return message

    def _allowance(self, now: float) -> tuple[float, str]:
        """Seconds the next read may wait, and which limit ends the wait ("rate" or "deadline")."""
        elapsed = now - self.started
        left = {"deadline": self.pace.deadline_s - elapsed}
        if self.pace.min_rate > 0:
            left["rate"] = self.pace.grace_s + self.received / self.pace.min_rate - elapsed
        broken = min(left, key=left.get)
        return left[broken], broken

    def _timeout(self, broken: str, now: float) -> BodyTimeout:
        elapsed = now - self.started
        pace = self.pace
        if broken == "deadline":
            message = (
                f"the body was not complete within {pace.deadline_s:g} s (setting {pace.deadline_setting}): "
                f"{self.received} bytes arrived in {elapsed:.1f} s"
            )
            return BodyTimeout(message, _number(pace.deadline_s), round(elapsed, 1))
        rate = self.received / elapsed if elapsed > 0 else 0.0
        message = (
            f"the body arrived slower than {pace.min_rate} bytes/s (setting body_min_rate_bytes_per_s, applied "
            f"after the first {pace.grace_s:g} s, setting body_grace_s): {self.received} bytes in {elapsed:.1f} s"
        )
        return BodyTimeout(message, pace.min_rate, round(rate))


def _number(value: float) -> float | int:
    return int(value) if math.isfinite(value) and value == int(value) else value


class BodyDeadline:
    """ASGI middleware: every request body is read through a BodyClock; a BodyTimeout raised by a
    reader that does not answer it itself (ntklab.service.caps.BodySizeLimit) is answered here, if no
    response has started."""

    def __init__(self, app, settings: Settings, uploads: frozenset[str]) -> None:
        self.app = app
        self.uploads = uploads
        self.body = BodyPace(
            settings.body_deadline_s, "body_deadline_s", settings.body_min_rate_bytes_per_s, settings.body_grace_s
        )
        self.upload = BodyPace(
            settings.upload_deadline_s, "upload_deadline_s", settings.body_min_rate_bytes_per_s, settings.body_grace_s
        )

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = scope.get("method") == "POST" and scope.get("path") in self.uploads
        clock = BodyClock(self.upload if upload else self.body, receive)
        started = False

        async def noting_start(message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, clock.receive, noting_start)
        except BodyTimeout as timeout:
            if started:
                raise
            problem = timeout.problem.model_copy(update={"instance": scope.get("path")})
            await problem_response(problem, timeout.headers)(scope, receive, send)
