"""ntklab: neural-tangent-kernel and Hessian diagnostics — is your network in the linear regime, and why?

The client and its errors load when first named (`ntklab.Client`, `from ntklab import Client`): the
server packages live under this one name too (`ntklab.service`, `ntklab.workers`, ...), and a server
process that imports them has no use for the HTTP client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
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


_CLIENTS = ("AsyncClient", "Client")


if not TYPE_CHECKING:  # type checkers see the imports above, and no __getattr__ that would make any name pass

    def __getattr__(name: str) -> Any:
        """The client classes (ntklab.client) and the errors (ntklab.errors), imported on first use (PEP 562)."""
        if name not in __all__:
            raise AttributeError(f"module 'ntklab' has no attribute {name!r}")
        value = getattr(importlib.import_module("ntklab.client" if name in _CLIENTS else "ntklab.errors"), name)
        globals()[name] = value
        return value
