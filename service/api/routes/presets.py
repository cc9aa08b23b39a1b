"""/v1/presets: the paper's experiments (Figure 1, Figure 2, Table 1, …) as one-call sweeps."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response

from ntklab.api_schemas.sweeps import PresetInfo, PresetList, PresetRun, Sweep
from ntklab.service import submission
from ntklab.service.api.deps import BrokerDep, OwnerDep, PublicUrlDep, SessionDep, SettingsDep
from ntklab.service.api.resources import submitted_sweep
from ntklab.service.api.routes import IDEMPOTENCY_KEY, PROBLEM, SUBMIT_PROBLEMS, StrictJSONRoute
from ntklab.service.grid import grid_size
from ntklab.service.presets import PRESETS, SCALES

router = APIRouter(prefix="/v1/presets", tags=["presets"], route_class=StrictJSONRoute)


@router.get("", response_model=PresetList, summary="The paper's experiments")
def list_presets() -> PresetList:
    return PresetList(
        data=[
            PresetInfo(
                name=preset.name,
                title=preset.title,
                claim=preset.claim,
                scales=list(SCALES),
                jobs={scale: grid_size(preset.sweep(scale).grid) for scale in SCALES},
                theory=preset.theory,
            )
            for preset in PRESETS.values()
        ]
    )


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
    scale = (run or PresetRun()).scale
    submitted = submission.submit_preset(name, scale, idempotency_key, session, owner, settings, broker)
    return submitted_sweep(session, submitted, settings, public_url)
