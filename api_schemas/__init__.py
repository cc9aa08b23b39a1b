"""The wire contract of ntklab: job specs, resources and problem details (pydantic v2)."""

from ntklab.api_schemas.spec import JobSpec

__all__ = ["JobSpec"]
