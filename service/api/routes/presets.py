"""/v1/presets: the paper's experiments (Figure 1, Figure 2, Table 1, …) as one-call sweeps."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response

from api_schemas.sweeps import PresetInfo, PresetList, PresetRun, Sweep
from service.api.deps import BrokerDep, OwnerDep, PublicUrlDep, SessionDep, SettingsDep
from service.api.routes import StrictJSONRoute
from service.api.routes.jobs import PROBLEM
from service.api.routes.sweeps import IDEMPOTENCY_KEY, SUBMIT_PROBLEMS, submit_sweep
from service.grid import grid_size
from service.presets import PRESETS, SCALES
from service.problems import ProblemError

router = APIRouter(prefix="/v1/presets", tags=["presets"], route_class=StrictJSONRoute)


@router.get("", response_model=PresetList, summary="The paper's experiments")
def list_presets() -> PresetList:
    return PresetList(data=[
        PresetInfo(name=preset.name, title=preset.title, claim=preset.claim, scales=list(SCALES),
                   jobs={scale: grid_size(preset.sweep(scale).grid) for scale in SCALES}, theory=preset.theory)
        for preset in PRESETS.values()
    ])


@router.post(
    "/{name}",
    status_code=202,
    response_model=Sweep,
    responses={404: {**PROBLEM, "description": "no such preset"}, **SUBMIT_PROBLEMS},
    summary="Run a preset as a sweep",
)
def run_preset(
    name: str,
    session: SessionDep,
    owner: OwnerDep,
    settings: SettingsDep,
    broker: BrokerDep,
    public_url: PublicUrlDep,
    run: Annotated[PresetRun | None, Body(openapi_examples={"cpu": {"value": {"scale": "cpu"}}})] = None,
    idempotency_key: Annotated[str | None, IDEMPOTENCY_KEY] = None,
) -> Response:
    """Submit the preset's sweep at `scale` (smoke | cpu | paper); follow it at GET /v1/sweeps/{id}.

    An Idempotency-Key is honoured as by POST /v1/sweeps: compared by the sweep the preset makes."""
    preset = PRESETS.get(name)
    if preset is None:
        raise ProblemError(404, f"no preset named {name!r}; GET /v1/presets lists them")
    return submit_sweep(preset.sweep((run or PresetRun()).scale), session, owner, settings, broker, idempotency_key, public_url)
