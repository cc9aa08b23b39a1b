"""Idempotency-Key: a retried POST with the same key and body gets the first answer, not a second job.

The body is compared by `spec_hash`, the SHA-256 of the canonical JSON (sorted keys, no
spaces) of the validated spec with every default filled in, so two bodies that differ only
in key order, whitespace or spelled-out defaults are the same request.
"""

from __future__ import annotations

import hashlib
import json

from api_schemas import problems as types
from api_schemas.problems import FieldError
from service.problems import ProblemError

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 200


def canonical_json(document: dict) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def spec_hash(document: dict) -> str:
    return hashlib.sha256(canonical_json(document).encode()).hexdigest()


def check_key(key: str | None) -> str | None:
    if key is not None and not 1 <= len(key) <= MAX_KEY_LENGTH:
        message = f"must be 1 to {MAX_KEY_LENGTH} characters, got {len(key)}"
        error = FieldError(field=HEADER, message=message, limit=MAX_KEY_LENGTH, value=len(key))
        raise ProblemError(422, f"{HEADER} {message}", type=types.VALIDATION, errors=[error])
    return key


def refuse_reuse(key: str, first_job_id: str) -> ProblemError:
    message = f"was already used for {first_job_id} with a different body; use a new key for a new job"
    return ProblemError(
        422,
        f"{HEADER} {key!r} {message}",
        type=types.IDEMPOTENCY_KEY_REUSED,
        title="Idempotency-Key reused with a different body",
        errors=[FieldError(field=HEADER, message=message, value=key)],
    )
