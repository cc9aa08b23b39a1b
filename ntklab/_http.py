"""Transport: one request = build once, send with retries, map failures to exceptions.

`Transport.request` / `AsyncTransport.request` are the one public way to the service: a JSON
body (`json=`) or raw bytes (`content=`, what uploads send) take the same path, so every
request, uploads included, has the same retries, headers and error mapping.

Retries (tenacity) cover connection errors, timeouts, 429 and 5xx. The wait before
retry k (k = 1, 2, …) is the answer's `Retry-After` when it has one (capped at
`MAX_RETRY_AFTER_S`), else exponential backoff with jitter:
min(INITIAL_BACKOFF_S · 2^(k−1), MAX_BACKOFF_S) + U(0, JITTER_S).
Every POST carries an `Idempotency-Key` generated once per call and reused by all of its
retries, so a retried create never makes a second resource.
"""

from __future__ import annotations

import contextlib
import dataclasses
import email.utils
import math
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx
from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from ntklab import errors

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
DEFAULT_MAX_RETRIES = 2
INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
JITTER_S = 0.25
MAX_RETRY_AFTER_S = 60.0


@dataclasses.dataclass(frozen=True)
class Options:
    """Everything that shapes a request; `with_options` makes a changed copy."""

    base_url: str
    api_key: str | None
    timeout: httpx.Timeout
    max_retries: int

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + path

    def headers(self, method: str, extra: Mapping[str, str] | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.api_key:
            headers["X-API-Key"] = self.api_key
        if method == "POST":
            headers["Idempotency-Key"] = f"ntklab-{uuid.uuid4()}"
        headers.update(extra or {})
        return headers


def retry_after_seconds(response: httpx.Response | None) -> float | None:
    """Seconds the `Retry-After` header asks for (delta-seconds or HTTP-date), or None."""
    value = response.headers.get("Retry-After") if response is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, errors.APIConnectionError):
        return True
    return isinstance(exc, errors.APIStatusError) and (exc.status_code == 429 or exc.status_code >= 500)


_backoff = wait_exponential_jitter(multiplier=INITIAL_BACKOFF_S, max=MAX_BACKOFF_S, jitter=JITTER_S)


def _wait(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome else None
    asked = retry_after_seconds(exc.response) if isinstance(exc, errors.APIStatusError) else None
    if asked is not None:
        return min(asked, MAX_RETRY_AFTER_S)
    return _backoff(state)


def retry_policy(max_retries: int) -> dict[str, Any]:
    """tenacity's arguments for `max_retries` retries of a retryable failure, waiting as the module says."""
    return dict(
        stop=stop_after_attempt(max_retries + 1),
        wait=_wait,
        retry=retry_if_exception(_is_retryable),
        reraise=True,
    )


def _checked(response: httpx.Response) -> httpx.Response:
    if response.is_error:
        raise errors.status_error(response)
    return response


@contextlib.contextmanager
def _mapped(request: httpx.Request) -> Iterator[None]:
    """httpx's timeouts and transport failures (while sending or while reading a streamed body) as the SDK's errors."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise errors.APITimeoutError(request=request) from exc
    except httpx.TransportError as exc:
        raise errors.APIConnectionError(f"Connection error: {exc}", request=request) from exc


Params = Mapping[str, Any]
Headers = Mapping[str, str]


def _build(
    http: httpx.Client | httpx.AsyncClient,
    options: Options,
    method: str,
    path: str,
    params: Params | None,
    json: Any,
    content: bytes | None,
    headers: Headers | None,
) -> httpx.Request:
    """The request, built once: every retry of a call sends these bytes with this Idempotency-Key."""
    return http.build_request(
        method=method,
        url=options.url(path),
        params={key: value for key, value in (params or {}).items() if value is not None},
        json=json,
        content=content,
        headers=options.headers(method, headers),
        timeout=options.timeout,
    )


class Transport:
    """Synchronous requests over one shared `httpx.Client`."""

    def __init__(self, options: Options, http: httpx.Client) -> None:
        self.options = options
        self.http = http

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: Headers | None = None,
    ) -> httpx.Response:
        """Send `method path` (a JSON body or raw `content`) with the retry policy; the answer if it is a success."""
        request = _build(self.http, self.options, method, path, params, json, content, headers)
        for attempt in Retrying(**retry_policy(self.options.max_retries)):
            with attempt:
                response = self._send(request)
        return response

    @contextlib.contextmanager
    def stream(self, path: str, *, headers: Headers | None = None) -> Iterator[httpx.Response]:
        """One GET of `path` whose body is read as it arrives (`iter_bytes`), without retries (the caller's loop
        retries: it knows what it has kept); an error answer raises as `request` does."""
        request = _build(self.http, self.options, "GET", path, None, None, None, headers)
        with _mapped(request):
            response = self.http.send(request, stream=True)
            try:
                if response.is_error:
                    response.read()
                yield _checked(response)
            finally:
                response.close()

    def _send(self, request: httpx.Request) -> httpx.Response:
        with _mapped(request):
            response = self.http.send(request)
        return _checked(response)


class AsyncTransport:
    """Asynchronous requests over one shared `httpx.AsyncClient`."""

    def __init__(self, options: Options, http: httpx.AsyncClient) -> None:
        self.options = options
        self.http = http

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: Headers | None = None,
    ) -> httpx.Response:
        """`Transport.request`, awaited."""
        request = _build(self.http, self.options, method, path, params, json, content, headers)
        async for attempt in AsyncRetrying(**retry_policy(self.options.max_retries)):
            with attempt:
                response = await self._send(request)
        return response

    @contextlib.asynccontextmanager
    async def stream(self, path: str, *, headers: Headers | None = None) -> AsyncIterator[httpx.Response]:
        """`Transport.stream`, awaited."""
        request = _build(self.http, self.options, "GET", path, None, None, None, headers)
        with _mapped(request):
            response = await self.http.send(request, stream=True)
            try:
                if response.is_error:
                    await response.aread()
                yield _checked(response)
            finally:
                await response.aclose()

    async def _send(self, request: httpx.Request) -> httpx.Response:
        with _mapped(request):
            response = await self.http.send(request)
        return _checked(response)


def poll_delay(response: httpx.Response, poll_interval: float) -> float:
    """Seconds to sleep before the next poll: at least `poll_interval`, at least `Retry-After`."""
    asked = retry_after_seconds(response)
    return max(poll_interval, min(asked, MAX_RETRY_AFTER_S) if asked is not None else 0.0)


class Deadline:
    """`timeout` seconds from now (never, for None): a `wait()` gives up when its next poll would fall past it."""

    def __init__(self, timeout: float | None) -> None:
        self.seconds = math.inf if timeout is None else timeout
        self._at = time.monotonic() + self.seconds

    def allows(self, delay: float) -> bool:
        """Whether sleeping `delay` seconds still ends within the deadline."""
        return time.monotonic() + delay <= self._at
