"""Exceptions raised by the SDK: one class per HTTP status, plus transport and job failures.

Every error answer of the service is RFC 9457 `application/problem+json`
({type, title, status, detail, errors: [{field, message, ...}]}); its fields are copied
onto the exception so callers can branch on them without parsing the body again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx

from ntklab.api_schemas.field_errors import named

if TYPE_CHECKING:
    from ntklab.resources.jobs import Job


class NtklabError(Exception):
    """Base of every exception the SDK raises on purpose."""


class APIError(NtklabError):
    """A request to the service did not produce a usable answer."""

    def __init__(self, message: str, *, request: httpx.Request | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.request = request


class APIConnectionError(APIError):
    """The service could not be reached (refused, reset, DNS, TLS) after every retry."""

    def __init__(self, message: str = "Connection error.", *, request: httpx.Request | None = None) -> None:
        super().__init__(message, request=request)


class APITimeoutError(APIConnectionError):
    """The service did not answer within the client's timeout, after every retry."""

    def __init__(self, message: str = "Request timed out.", *, request: httpx.Request | None = None) -> None:
        super().__init__(message, request=request)


class APIStatusError(APIError):
    """The service answered with a 4xx or 5xx status; the problem+json fields are attributes.

    `status_code` (and its older name `status`) is this answer's status: a 503 reads 503 on an
    InternalServerError, which stands for every 5xx."""

    def __init__(self, response: httpx.Response, problem: dict[str, Any]) -> None:
        self.response = response
        self.status_code: int = response.status_code
        self.status: int = response.status_code
        self.type: str = problem.get("type") or "about:blank"
        self.title: str = problem.get("title") or response.reason_phrase
        self.detail: str | None = problem.get("detail")
        self.errors: list[dict[str, Any]] = list(problem.get("errors") or [])
        super().__init__(_describe(self.status, self.title, self.detail, self.errors), request=response.request)

    @property
    def fields(self) -> list[str]:
        """Dotted paths of the offending fields, in the order the service listed them."""
        return [str(error.get("field")) for error in self.errors if error.get("field") is not None]


class BadRequestError(APIStatusError):
    """A 400 answer."""


class AuthenticationError(APIStatusError):
    """A 401 answer."""


class PermissionDeniedError(APIStatusError):
    """A 403 answer."""


class NotFoundError(APIStatusError):
    """A 404 answer."""


class ConflictError(APIStatusError):
    """A 409 answer."""


class PayloadTooLargeError(APIStatusError):
    """A 413 answer."""


class UnprocessableEntityError(APIStatusError):
    """A 422 answer."""


class RateLimitError(APIStatusError):
    """A 429 answer."""


class InternalServerError(APIStatusError):
    """Any 5xx answer; `status_code` says which."""


class JobFailedError(NtklabError):
    """`wait()` saw the job end `failed` or `cancelled`; `.job` is its final state."""

    def __init__(self, job: Job) -> None:
        self.job = job
        if job.error:
            reason = f": {job.error.type}: {job.error.message}"
        else:
            reason = "" if job.status == "cancelled" else ": no error recorded"
        super().__init__(f"job {job.id} {job.status}{reason}")


class WaitTimeoutError(NtklabError, TimeoutError):
    """`wait()` gave up before the job or sweep finished; `.resource` is its last state."""

    def __init__(self, resource: Any, timeout: float) -> None:
        self.resource = resource
        super().__init__(f"{resource.id} still {resource.status} after {timeout:g} s")


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def status_error(response: httpx.Response) -> APIStatusError:
    """The exception for an error response, filled from its problem+json body when it has one."""
    cls = _BY_STATUS.get(response.status_code)
    if cls is None:
        cls = InternalServerError if response.status_code >= 500 else APIStatusError
    return cls(response, _problem(response))


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {"detail": response.text[:500] or None}
    return body if isinstance(body, dict) else {"detail": str(body)[:500]}


def _describe(status: int, title: str, detail: str | None, errors: list[dict[str, Any]]) -> str:
    """ "422 Request failed validation: detail", then each field error the detail does not already say."""
    text = f"{status} {title}"
    if detail:
        text += f": {detail}"
    for error in errors:
        line = named(error.get("field") or "?", str(error.get("message", "")))
        if line not in (detail or ""):
            text += f"\n  {line}"
    return text


class ExportMismatchError(NtklabError, ValueError):
    """An exported ONNX model is not the module it came from: other parameters, or other outputs.

    `missing` are the module's trainable parameters the export lacks, `extra` the export's
    trainable initializers the module does not have (a folded BatchNorm shows as both),
    `reshaped` [(name, module shape, export shape)]; `max_difference` the largest |Δ| of the
    outputs on the example input (None when the parameters already differ).
    """

    def __init__(
        self,
        message: str,
        *,
        missing: Sequence[str] = (),
        extra: Sequence[str] = (),
        reshaped: Sequence[tuple[str, list[int], list[int]]] = (),
        max_difference: float | None = None,
    ) -> None:
        super().__init__(message)
        self.missing, self.extra, self.reshaped = list(missing), list(extra), list(reshaped)
        self.max_difference = max_difference
