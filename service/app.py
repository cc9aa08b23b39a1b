"""The FastAPI application factory: `create_app(settings)`; `uvicorn --factory ntklab.service.app:create_app` serves it.

Nothing is built at import time: the factory reads one `Settings` (from the environment
when none is given) and builds the engine, sessions, broker and limiters from it.

The client address (the per-address limit on failed key checks) is the connection's peer;
X-Forwarded-For and X-Forwarded-Proto are believed only from `settings.trusted_proxies`
(none by default), so uvicorn must be started with `--no-proxy-headers` (ntklab up,
the local stacks, the Dockerfile and compose do). A path with a trailing slash is a 404
problem, never a redirect built from the request's Host header.

Middleware, outermost first: proxy headers (when configured), request latency, body timing
(service/body_timing.py: a minimum rate and a deadline, 408), body size (service/caps.py:
413; it reads every body but an upload's before the app runs).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import Depends, FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from ntklab.config.settings import Settings
from ntklab.service import upload_folders
from ntklab.service.api.auth import RESPONSES as AUTH_RESPONSES
from ntklab.service.api.auth import KeyCache
from ntklab.service.api.deps import current_caller
from ntklab.service.api.openapi import install_openapi, operation_id
from ntklab.service.api.routes import artifacts, datasets, health, jobs, models, presets, sweeps
from ntklab.service.auth_startup import ensure_bootstrap_admin, warn_if_open
from ntklab.service.body_timing import BodyDeadline
from ntklab.service.caps import BodySizeLimit
from ntklab.service.model_checks import ModelChecks
from ntklab.service.observability import RequestLatency, make_registry
from ntklab.service.problems import ProblemAPI, install_problem_handlers
from ntklab.service.rate_limit import make_limiters
from ntklab.service.ui.routes import install_dashboard
from ntklab.service.uploads import UPLOAD_PATHS, UploadSlots
from ntklab.store.db import make_engine, make_read_session_factory, make_session_factory
from ntklab.workers.queue import make_broker

DESCRIPTION = """\
Neural-tangent-kernel and Hessian diagnostics as a service. Submit a job spec (a network,
its data, a training run, the diagnostics wanted) to `POST /v1/jobs`, poll
`GET /v1/jobs/{id}` until it has finished, then read its summary, metric series and
artifacts. Errors are RFC 9457 `application/problem+json`.
"""
# an upload folder of another host is removed once unchanged this long past the upload deadline (checks included)
UPLOAD_FOLDER_MARGIN_S = 3600.0


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    engine = make_engine(settings.database_url, pool_size=settings.database_pool_size)
    app = ProblemAPI(
        title="ntklab",
        version="1",
        description=DESCRIPTION,
        lifespan=_lifespan,
        redirect_slashes=False,
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )
    install_dashboard(app)
    install_openapi(app)
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessions = make_session_factory(engine)
    app.state.read_sessions = make_read_session_factory(engine)
    app.state.broker = make_broker(settings)
    app.state.key_cache = KeyCache(settings.auth_cache_s)
    app.state.rate_limiter, app.state.auth_failures = make_limiters(settings)
    app.state.upload_slots = UploadSlots(settings.max_concurrent_uploads_per_key, settings.retry_after_s)
    app.state.model_checks = ModelChecks(
        settings.max_concurrent_model_checks, settings.body_deadline_s, settings.retry_after_s
    )
    app.state.metrics_registry, latency = make_registry(app.state.sessions, app.state.broker)
    install_problem_handlers(app, settings.retry_after_s)
    for router in (jobs.router, artifacts.router, sweeps.router, presets.router, datasets.router, models.router):
        app.include_router(router, dependencies=[Depends(current_caller)], responses=AUTH_RESPONSES)
    app.include_router(health.router)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, streamed=UPLOAD_PATHS)
    app.add_middleware(BodyDeadline, settings=settings, uploads=UPLOAD_PATHS)  # outside BodySizeLimit: times its reads
    app.add_middleware(RequestLatency, histogram=latency)
    if settings.trusted_proxies:
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=[str(network) for network in settings.trusted_proxies])
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    anyio.to_thread.current_default_thread_limiter().total_tokens = settings.database_pool_size
    warn_if_open(settings)
    ensure_bootstrap_admin(settings, app.state.sessions)
    upload_folders.sweep(settings.upload_dir, stale_after_s=settings.upload_deadline_s + UPLOAD_FOLDER_MARGIN_S)
    reaper = asyncio.create_task(_reaper(app)) if settings.reaper_enabled else None
    try:
        yield
    finally:
        if reaper is not None:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
        app.state.engine.dispose()


async def _reaper(app: FastAPI) -> None:
    from ntklab.service.reaper import reaper_loop

    await reaper_loop(app.state.settings, app.state.sessions, app.state.broker)
