"""RFC 9457 problem details: every error ntklab answers is one of these, as application/problem+json.

`type` is a URN naming the kind of problem (docs/api.md lists them); generic HTTP errors
(404, 405) use "about:blank" with the status phrase as `title`. Validation and cap
problems carry `errors`, one entry per offending field, with the field's dotted path
(`model.hidden.1`), and for caps the limit and the value that exceeded it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

PROBLEM_MEDIA_TYPE = "application/problem+json"

VALIDATION = "urn:ntklab:problem:validation"
RESOURCE_CAP = "urn:ntklab:problem:resource-cap"
IDEMPOTENCY_KEY_REUSED = "urn:ntklab:problem:idempotency-key-reused"
MALFORMED_JSON = "urn:ntklab:problem:malformed-json"
NUL_CHARACTER = "urn:ntklab:problem:nul-character"
UNSUPPORTED_MEDIA_TYPE = "urn:ntklab:problem:unsupported-media-type"
BODY_TOO_LARGE = "urn:ntklab:problem:body-too-large"
BODY_TIMEOUT = "urn:ntklab:problem:body-timeout"
STORAGE_QUOTA = "urn:ntklab:problem:storage-quota"
TOO_MANY_ACTIVE_JOBS = "urn:ntklab:problem:too-many-active-jobs"
UNAUTHORIZED = "urn:ntklab:problem:unauthorized"
RATE_LIMITED = "urn:ntklab:problem:rate-limited"
INVALID_STATE = "urn:ntklab:problem:invalid-state"
DATABASE_UNAVAILABLE = "urn:ntklab:problem:database-unavailable"
NOT_READY = "urn:ntklab:problem:not-ready"
SERVER_BUSY = "urn:ntklab:problem:server-busy"
INSUFFICIENT_STORAGE = "urn:ntklab:problem:insufficient-storage"
INTERNAL = "urn:ntklab:problem:internal"
BLANK = "about:blank"

Scalar = int | float | str | bool


class FieldError(BaseModel):
    """One offending input: where it is, what is wrong, and for caps the limit and the value sent."""

    model_config = ConfigDict(extra="forbid")

    field: str = Field(description="dotted path into the request, e.g. model.hidden.1, or a header/query name")
    message: str
    limit: Scalar | None = None
    value: Scalar | None = None


class Problem(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "type": RESOURCE_CAP,
                    "title": "Request exceeds a resource cap",
                    "status": 422,
                    "detail": "model.hidden.1 = 5000000 exceeds the cap of 2000000 (by 3000000)",
                    "errors": [
                        {
                            "field": "model.hidden.1",
                            "message": "width 5000000 exceeds the cap of 2000000 (by 3000000)",
                            "limit": 2000000,
                            "value": 5000000,
                        }
                    ],
                }
            ]
        },
    )

    type: str = BLANK
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[FieldError] | None = None

    def body(self) -> dict:
        """The JSON object sent on the wire: absent members are left out, not null."""
        return self.model_dump(mode="json", exclude_none=True)
