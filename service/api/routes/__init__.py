"""What every route shares: strict JSON in, finite JSON out.

In: a body the route parses must be JSON (415 otherwise); invalid UTF-8, invalid syntax and
nesting deeper than the parser's recursion limit are a 400 problem, never a 500. The
literals NaN and ±Infinity parse to floats here and are refused by the spec models
(`allow_inf_nan=False`), so the 422 names the field that held them.
URLs: a NUL character in the path or query is a 400 (no database stores it in text).
Out: responses are encoded with `allow_nan=False`, so a non-finite number can never be sent.
The OpenAPI schema of every route lists these shared problems (400; 422 where the route takes
input; 408, 413 and 415 where it reads a body; 503 while the database is down) beside its own.
"""

from __future__ import annotations

import email.message
import json
from typing import Any

from fastapi import Header, Request
from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies.utils import get_flat_params
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import Problem
from ntklab.service.idempotency import HEADER
from ntklab.service.problems import ProblemError

PROBLEM = {"model": Problem, "content": {types.PROBLEM_MEDIA_TYPE: {}}}
SHARED_PROBLEMS = {
    400: {
        **PROBLEM,
        "description": "malformed JSON body, a NUL character in the URL, or a cursor this API did not give out",
    },
    503: {**PROBLEM, "description": "the database is unreachable; retry after Retry-After seconds"},
}
INPUT_PROBLEMS = {
    422: {**PROBLEM, "description": "a parameter or the body failed validation; `errors` names each field"}
}
BODY_PROBLEMS = {
    408: {
        **PROBLEM,
        "description": "the body arrived slower than body_min_rate_bytes_per_s or not within body_deadline_s; "
        "the connection is closed",
    },
    413: {**PROBLEM, "description": "body larger than max_body_bytes"},
    415: {**PROBLEM, "description": "the body is not application/json"},
}

SUBMIT_PROBLEMS = {
    422: {
        **PROBLEM,
        "description": "invalid grid or spec, a cap exceeded (max_sweep_jobs, max_sweep_bytes, …), "
        "or an Idempotency-Key reused with another body",
    },
    429: {**PROBLEM, "description": "too many queued + running jobs"},
}
"""What submitting a sweep (POST /v1/sweeps, POST /v1/presets/{name}) may answer besides the shared problems."""
IDEMPOTENCY_KEY = Header(
    alias=HEADER, description="retry-safe: same key + same body → the first answer, not a second sweep"
)


class FiniteJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if isinstance(kwargs.get("response_class"), DefaultPlaceholder | None):
            kwargs["response_class"] = FiniteJSONResponse
        super().__init__(*args, **kwargs)
        takes_body = self.body_field is not None
        shared = SHARED_PROBLEMS | (INPUT_PROBLEMS if takes_body or get_flat_params(self.dependant) else {})
        self.responses = shared | (BODY_PROBLEMS if takes_body else {}) | self.responses

    def get_route_handler(self):
        handle = super().get_route_handler()
        takes_body = self.body_field is not None

        async def strict_handler(request: Request):
            request = StrictJSONRequest(request.scope, request.receive)
            if "\x00" in request.scope["path"] or any(
                "\x00" in key + value for key, value in request.query_params.multi_items()
            ):
                raise ProblemError(400, "NUL characters are not allowed in URLs", type=types.NUL_CHARACTER)
            if takes_body and not _is_json(request.headers.get("content-type")) and await request.body():
                raise ProblemError(
                    415,
                    "send the body as application/json",
                    type=types.UNSUPPORTED_MEDIA_TYPE,
                )
            return await handle(request)

        return strict_handler


def parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except UnicodeDecodeError as error:
        raise _malformed(f"the body is not UTF-8 ({error.reason} at byte {error.start})") from error
    except json.JSONDecodeError as error:
        raise _malformed(f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}") from error
    except RecursionError as error:
        raise _malformed("the JSON body is nested too deeply") from error
    except ValueError as error:
        raise _malformed(f"invalid JSON: {error}") from error


def _malformed(detail: str) -> ProblemError:
    return ProblemError(400, detail, type=types.MALFORMED_JSON, title="Malformed JSON body")


def _is_json(content_type: str | None) -> bool:
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))
