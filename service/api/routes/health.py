"""Liveness, readiness (database and broker) and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import Problem
from ntklab.service.api.deps import BrokerDep, SessionDep, SettingsDep
from ntklab.service.api.routes import StrictJSONRoute
from ntklab.service.problems import ProblemError
from ntklab.store.db import answers

router = APIRouter(tags=["operations"], route_class=StrictJSONRoute)


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: the database answers SELECT 1 and the broker accepts connections",
    responses={503: {"model": Problem, "content": {types.PROBLEM_MEDIA_TYPE: {}}, "description": "not ready"}},
)
def readyz(session: SessionDep, settings: SettingsDep, broker: BrokerDep) -> dict[str, str]:
    checks = {"database": answers(session), "broker": broker.ok()}
    failing = [name for name, ok in checks.items() if not ok]
    if failing:
        raise ProblemError(
            503,
            f"not ready: {', '.join(failing)} unreachable",
            type=types.NOT_READY,
            title="Not ready",
            headers={"Retry-After": str(settings.retry_after_s)},
        )
    return {"status": "ready", **{name: "ok" for name in checks}}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics_registry), media_type=CONTENT_TYPE_LATEST)
