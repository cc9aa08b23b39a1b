"""Every error as RFC 9457 problem+json: raised problems, validation, HTTP errors, a lost database, bugs.

Validation errors name the offending field by its dotted path in the request body
(`model.hidden.0`, `data.x.3.1`), once per field and message, without pydantic's union
noise (api_schemas/field_errors.py, shared with `ntklab run --local`).

Every problem can be sent whatever the request held: a lone surrogate (`"\\ud800"` in a
JSON body, a key or a value that a problem echoes) is not Unicode and has no UTF-8 form,
so the body writes it as the six visible characters `\\ud800` (ProblemResponse).

An unexpected error is a 500 problem on a connection that stays open (ProblemAPI): Starlette's
ServerErrorMiddleware sends on_bug's answer and then raises the error again, for the server to
log or a test client to raise, and uvicorn closes every connection whose request raised after
its answer started. on_bug has logged it, so once the answer is complete the error ends here;
Starlette's TestClient, which asks for the `http.response.debug` extension, still gets it
(`raise_server_exceptions`), and an error in the middle of an answer still closes the connection.
"""

from __future__ import annotations

import json
import logging
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
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.base import LONE_SURROGATE
from ntklab.api_schemas.field_errors import field_errors, named
from ntklab.api_schemas.problems import FieldError, Problem

log = logging.getLogger(__name__)

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


class ProblemAPI(FastAPI):
    """FastAPI whose outermost layer is AnsweredErrors."""

    def build_middleware_stack(self) -> ASGIApp:
        return AnsweredErrors(super().build_middleware_stack())


class AnsweredErrors:
    """Ends an error raised after its whole answer was sent, so the server keeps the connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "http.response.debug" in scope.get("extensions", {}):
            await self.app(scope, receive, send)
            return
        answered = False

        async def watched(message: Message) -> None:
            nonlocal answered
            await send(message)
            answered = answered or (message["type"] == "http.response.body" and not message.get("more_body", False))

        try:
            await self.app(scope, receive, watched)
        except Exception:
            if not answered:
                raise


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
    shown = "; ".join(named(error.field, error.message) for error in errors[:3])
    more = len(errors) - 3
    return shown + (f" (and {more} more)" if more > 0 else "")
