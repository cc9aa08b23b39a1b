"""The OpenAPI description both upload routes share (/v1/datasets, /v1/models): their body and their answers.

upload_body(description, parts)                     openapi_extra: a raw body, or multipart `parts` + `name`
upload_responses(model, existed, too_large, invalid)  200 (existed before), 408, 413, 422, 429
"""

from __future__ import annotations

from typing import Any

from ntklab.service.api.routes import PROBLEM

BINARY = {"type": "string", "format": "binary"}


def upload_body(description: str, parts: dict[str, str | None]) -> dict[str, Any]:
    """The request body: the file as the body, or multipart with a binary part per `parts` (name: its description,
    or None) and an optional text part `name`."""
    properties: dict[str, Any] = {
        part: BINARY | ({"description": about} if about else {}) for part, about in parts.items()
    }
    multipart = {
        "schema": {"type": "object", "properties": properties | {"name": {"type": "string", "maxLength": 200}}}
    }
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {"application/octet-stream": {"schema": BINARY}, "multipart/form-data": multipart},
        }
    }


def upload_responses(model: type, *, existed: str, too_large: str, invalid: str) -> dict[int, dict[str, Any]]:
    """The answers of an upload beside its 201: the resource again when its content existed, and the problems."""
    return {
        200: {"model": model, "description": existed},
        408: {
            **PROBLEM,
            "description": "the body arrived slower than body_min_rate_bytes_per_s or not within "
            "upload_deadline_s; the connection is closed",
        },
        413: {**PROBLEM, "description": too_large},
        422: {**PROBLEM, "description": invalid},
        429: {
            **PROBLEM,
            "description": "this key already has max_concurrent_uploads_per_key uploads in progress "
            "(or a rate limit); Retry-After",
        },
    }
