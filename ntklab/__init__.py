"""ntklab: neural-tangent-kernel and Hessian diagnostics — is your network in the linear regime, and why?"""

__version__ = "0.1.0"

from ntklab.client import AsyncClient, Client
from ntklab.errors import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ExportMismatchError,
    InternalServerError,
    JobFailedError,
    NotFoundError,
    NtklabError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    UnprocessableEntityError,
    WaitTimeoutError,
)

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIStatusError",
    "APITimeoutError",
    "AsyncClient",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "ExportMismatchError",
    "InternalServerError",
    "JobFailedError",
    "NotFoundError",
    "NtklabError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "UnprocessableEntityError",
    "WaitTimeoutError",
]
