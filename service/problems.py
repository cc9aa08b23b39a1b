"""Every error as RFC 9457 problem+json: raised problems, validation, HTTP errors, a lost database, bugs.

Validation errors name the offending field by its dotted path in the request body
(`model.hidden.0`, `data.x.3.1`): pydantic's location without the "body" prefix and
without the union-member tags pydantic inserts (`gaussian_mixture`, `list[float]`, …),
which are recognised by walking the request body along the location.

Every problem can be sent whatever the request held: a lone surrogate (`"\\ud800"` in a
JSON body, a key or a value that a problem echoes) is not Unicode and has no UTF-8 form,
so the body writes it as the six visible characters `\\ud800` (ProblemResponse).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from api_schemas import problems as types
from api_schemas.base import LONE_SURROGATE
from api_schemas.problems import FieldError, Problem

log = logging.getLogger(__name__)

REQUEST_PARTS = ("body", "query", "path", "header", "cookie")
LIMIT_KEYS = ("le", "lt", "ge", "gt", "max_length", "min_length", "multiple_of")
MAX_REPORTED_ERRORS = 50
MAX_ECHOED_STRING = 200
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class ProblemError(HTTPException):
    """Raise anywhere to answer with a problem; a subclass of FastAPI's HTTPException so it passes body parsing."""

    def __init__(
        self,
        status: int,
        detail: str,
        type: str = types.BLANK,
        title: str | None = None,
        errors: Sequence[FieldError] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status_code=status, detail=detail, headers=headers)
        self.problem = Problem(
            type=type,
            title=title or HTTPStatus(status).phrase,
            status=status,
            detail=detail,
            errors=list(errors) if errors else None,
        )


class ProblemResponse(JSONResponse):
    """application/problem+json that encodes any text: each lone surrogate is written as its escape, `\\udXXX`."""

    media_type = types.PROBLEM_MEDIA_TYPE

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return LONE_SURROGATE.sub(lambda found: f"\\\\u{ord(found[0]):04x}", text).encode()


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> JSONResponse:
    return ProblemResponse(problem.body(), status_code=problem.status, headers=headers)


def install_problem_handlers(app: FastAPI, retry_after_s: int) -> None:
    retry_after = {"Retry-After": str(retry_after_s)}

    async def on_problem(request: Request, exc: ProblemError) -> JSONResponse:
        return problem_response(exc.problem.model_copy(update={"instance": request.url.path}), exc.headers)

    async def on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = field_errors(exc.errors(), exc.body)
        problem = Problem(
            type=types.VALIDATION,
            title="Request failed validation",
            status=422,
            detail=summarize(errors),
            instance=request.url.path,
            errors=errors,
        )
        return problem_response(problem)

    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        problem = Problem(
            title=HTTPStatus(exc.status_code).phrase,
            status=exc.status_code,
            detail=str(exc.detail),
            instance=request.url.path,
        )
        headers = exc.headers
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": allowed_methods(request)}
        return problem_response(problem, headers)

    async def on_database_down(request: Request, exc: Exception) -> JSONResponse:
        log.warning("database unavailable: %s", exc)
        problem = Problem(
            type=types.DATABASE_UNAVAILABLE,
            title="Database unavailable",
            status=503,
            detail="the database cannot be reached; retry later",
            instance=request.url.path,
        )
        return problem_response(problem, retry_after)

    async def on_bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        problem = Problem(
            type=types.INTERNAL,
            title="Internal Server Error",
            status=500,
            detail="an unexpected error occurred; it has been logged",
            instance=request.url.path,
        )
        return problem_response(problem)

    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(OperationalError, on_database_down)
    app.add_exception_handler(PoolTimeoutError, on_database_down)
    app.add_exception_handler(Exception, on_bug)


def allowed_methods(request: Request) -> str:
    """The methods some route answers at the request's path, for a 405's Allow (Starlette names the first route's only)."""

    def answered(method: str) -> bool:
        scope = {**request.scope, "method": method}
        return any(route.matches(scope)[0] is Match.FULL for route in request.app.router.routes)

    return ", ".join(method for method in HTTP_METHODS if answered(method))


def summarize(errors: Sequence[FieldError]) -> str:
    shown = "; ".join(f"{error.field}: {error.message}" for error in errors[:3])
    more = len(errors) - 3
    return shown + (f" (and {more} more)" if more > 0 else "")


def field_errors(errors: Sequence[dict[str, Any]], body: Any) -> list[FieldError]:
    """pydantic errors → FieldErrors with dotted paths, deduplicated, at most MAX_REPORTED_ERRORS."""
    seen: dict[tuple[str, str], FieldError] = {}
    for error in errors:
        field = dotted_field(error["loc"], body, error["type"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if (field, message) in seen:
            continue
        seen[(field, message)] = FieldError(
            field=field,
            message=message,
            limit=_limit(error.get("ctx") or {}),
            value=None if error["type"] == "missing" else echoable(error.get("input")),
        )
        if len(seen) == MAX_REPORTED_ERRORS:
            break
    return list(seen.values())


def dotted_field(loc: Sequence[int | str], body: Any, error_type: str) -> str:
    """("body", "data", "gaussian_mixture", "n_train") → "data.n_train"; ("query", "limit") → "limit"."""
    parts = list(loc)
    part_of_request = parts.pop(0) if parts and parts[0] in REQUEST_PARTS else None
    if not parts:
        return part_of_request or ""
    node, known = body, part_of_request == "body"
    kept: list[int | str] = []
    for index, part in enumerate(parts):
        if known and _has(node, part):
            kept.append(part)
            node = node[part]
            continue
        is_last = index == len(parts) - 1
        if known and isinstance(part, str) and _is_union_tag(part, node, is_last, error_type):
            continue
        kept.append(part)
        known = False
    return ".".join(str(part) for part in kept)


def echoable(value: Any) -> int | float | str | bool | None:
    """A scalar safe to echo back: finite numbers, booleans and short strings; None otherwise."""
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str) and len(value) <= MAX_ECHOED_STRING:
        return value
    return None


def _has(node: Any, part: int | str) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def _is_union_tag(part: str, node: Any, is_last: bool, error_type: str) -> bool:
    if isinstance(node, dict) and node.get("kind") == part:
        return True
    return not (is_last and error_type == "missing")


def _limit(ctx: dict[str, Any]) -> int | float | str | None:
    for key in LIMIT_KEYS:
        if key in ctx:
            return echoable(ctx[key])
    return None
