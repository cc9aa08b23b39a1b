"""Idempotency-Key: a retried POST with the same key and body gets the first answer, not a second job or sweep.

A job's body is compared by `spec_hash`, the SHA-256 of the canonical JSON (sorted keys, no
spaces) of the validated spec with every default filled in, so two bodies that differ only
in key order, whitespace or spelled-out defaults are the same request.

A sweep's body (POST /v1/sweeps, and the sweep a preset makes) is compared by `digest` of
its stored document's `compact_json`: the base is the canonical spec that validation wrote
out, in the schema's own key order, so the same holds for it; the grid keeps the order it
was sent in, because that order is the order of the sweep's jobs. A sweep job's `spec_hash`
is `sweep_job_hash` of that digest and its patch (store/sweep_specs.py), so a sweep's inline
data is serialized once, not once per job.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pydantic_core

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import FieldError
from ntklab.service.problems import ProblemError

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 200


def canonical_json(document: dict) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def spec_hash(document: dict) -> str:
    return hashlib.sha256(canonical_json(document).encode()).hexdigest()


def compact_json(document: Any) -> bytes:
    """JSON without spaces, keys in the document's own order (pydantic-core: several times faster than json.dumps on a million numbers)."""
    return pydantic_core.to_json(document)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sweep_job_hash(sweep_digest: str, patch: dict) -> str:
    return spec_hash({"sweep": sweep_digest, "patch": patch})


def check_key(key: str | None) -> str | None:
    if key is not None and not 1 <= len(key) <= MAX_KEY_LENGTH:
        message = f"must be 1 to {MAX_KEY_LENGTH} characters, got {len(key)}"
        error = FieldError(field=HEADER, message=message, limit=MAX_KEY_LENGTH, value=len(key))
        raise ProblemError(422, f"{HEADER} {message}", type=types.VALIDATION, errors=[error])
    return key


def refuse_reuse(key: str, first_id: str) -> ProblemError:
    """422: `key` already made `first_id` (a job or a sweep) from another body."""
    message = f"was already used for {first_id} with a different body; use a new key for a new request"
    return ProblemError(
        422,
        f"{HEADER} {key!r} {message}",
        type=types.IDEMPOTENCY_KEY_REUSED,
        title="Idempotency-Key reused with a different body",
        errors=[FieldError(field=HEADER, message=message, value=key)],
    )
