"""Dependencies of the routes: the app's settings and broker, a database session per request, the caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from ntklab.config.settings import Settings
from ntklab.service.api.auth import Caller, authenticate
from ntklab.workers.queue import Broker


async def app_settings(request: Request) -> Settings:
    """async: FastAPI runs a plain def dependency on its thread pool, and a hop there costs 0.2–0.5 ms a request
    on a loaded 2-core machine; the pure ones here (no I/O) run on the event loop instead."""
    return request.app.state.settings


READ_METHODS = frozenset({"GET", "HEAD"})


def session(request: Request) -> Iterator[Session]:
    """One session per request; a GET or HEAD gets an autocommit one (ntklab.store.db: no BEGIN/ROLLBACK).

    It connects at its first statement, after the body was read (ntklab.service.caps.BodySizeLimit reads
    every body but an upload's before the app runs; the upload routes take no session), and it is
    closed when the route's function returns (`scope="function"`), before the response is sent: a
    client slow to read its answer holds no connection either."""
    factory = request.app.state.read_sessions if request.method in READ_METHODS else request.app.state.sessions
    with factory() as opened:
        yield opened


def public_url(request: Request) -> str:
    """The base of Location headers and artifact URLs, without a trailing slash: settings.public_url
    if set, else the address this request came to (its scheme, Host and port, the app's root path)."""
    return (request.app.state.settings.public_url or str(request.base_url)).rstrip("/")


async def broker(request: Request) -> Broker:
    return request.app.state.broker


def current_caller(request: Request) -> Caller:
    """The caller's key (401 without a valid one when auth is on), held to its request rate (429).

    The key is looked up in a short autocommit session of its own, closed before the route runs:
    not in the request's session, which would keep a connection (inside a transaction, for a
    POST) while an upload's body arrives."""
    state = request.app.state
    address = request.client.host if request.client else "unknown"
    caller = authenticate(
        state.settings, request.headers, state.read_sessions, state.key_cache, state.auth_failures, address
    )
    state.rate_limiter.check(caller.owner)
    return caller


async def current_owner(caller: Annotated[Caller, Depends(current_caller)]) -> str:
    """The owner of what this request creates."""
    return caller.owner


async def read_scope(caller: Annotated[Caller, Depends(current_caller)]) -> str | None:
    """The owner whose rows this request may read; None (everyone's) for the admin key."""
    return caller.scope


SettingsDep = Annotated[Settings, Depends(app_settings)]
SessionDep = Annotated[Session, Depends(session, scope="function")]
OwnerDep = Annotated[str, Depends(current_owner)]
ScopeDep = Annotated[str | None, Depends(read_scope)]
BrokerDep = Annotated[Broker, Depends(broker)]
PublicUrlDep = Annotated[str, Depends(public_url)]
