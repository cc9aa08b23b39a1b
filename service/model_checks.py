"""How many large ONNX files this API process checks at once.

Checking an upload parses its protobuf from a memory map of the file: the process holds one private copy, the
parsed model, while the file's pages are mapped from the page cache (resident, shared and reclaimable: counted in
its resident size, about twice the file in all); service/onnx_upload.py checks and infers shapes on a copy
without the weights. Files of at least LARGE_MODEL_BYTES are checked `limit` at a time
(setting max_concurrent_model_checks); the others wait for a turn up to `wait_s`, then get a 503 with
Retry-After. So the API's memory for uploads stays near limit × 2 × max_upload_bytes whatever the number of
uploads in flight (docs/operations.md, measured). Smaller files are checked without waiting.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import FieldError
from ntklab.service.problems import ProblemError

LARGE_MODEL_BYTES = 16 * 2**20


class ModelChecks:
    """Turns for checking large models in this process (thread-safe: checks run in the thread pool)."""

    def __init__(self, limit: int, wait_s: float, retry_after_s: int) -> None:
        self.limit, self.wait_s, self.retry_after_s = limit, wait_s, retry_after_s
        self._turns = threading.BoundedSemaphore(limit)

    @contextlib.contextmanager
    def turn(self, size: int) -> Iterator[None]:
        """The block runs when a turn is free (at once below LARGE_MODEL_BYTES); 503 after waiting wait_s."""
        if size < LARGE_MODEL_BYTES:
            yield
            return
        if not self._turns.acquire(timeout=self.wait_s):
            raise self._busy()
        try:
            yield
        finally:
            self._turns.release()

    def _busy(self) -> ProblemError:
        message = (
            f"{self.limit} large models (at least {LARGE_MODEL_BYTES} bytes) are being checked and none finished "
            f"within {self.wait_s:g} s (setting max_concurrent_model_checks); send it again later"
        )
        return ProblemError(
            503,
            f"{message}; retry after {self.retry_after_s} s",
            type=types.SERVER_BUSY,
            title="Service unavailable",
            errors=[FieldError(field="concurrent_model_checks", message=message, limit=self.limit)],
            headers={"Retry-After": str(self.retry_after_s)},
        )
