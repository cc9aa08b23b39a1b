"""`client.presets`: the paper's experiments, each a documented sweep at a chosen scale."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict

from ntklab._resource import AsyncAPIResource, SyncAPIResource
from ntklab.api_schemas.sweeps import PresetInfo
from ntklab.resources.sweeps import Sweep, idempotency_header

Scale = Literal["smoke", "cpu", "paper"]


class Preset(PresetInfo):
    """One of the paper's experiments: name, title, the claim it checks, scales and job counts."""

    model_config = ConfigDict(extra="allow")


def _presets(page: dict[str, Any]) -> list[Preset]:
    return [Preset.model_validate(item) for item in page["data"]]


class Presets(SyncAPIResource):
    def list(self) -> list[Preset]:
        """Every preset (one unpaged list)."""
        return _presets(self._get("/v1/presets", cast_to=dict))

    def run(self, name: str, *, scale: Scale = "smoke", idempotency_key: str | None = None) -> Sweep:
        """Start the preset as a sweep; follow it with `client.sweeps.wait(sweep.id)`.

        Retries reuse one Idempotency-Key (yours, or one made for the call): one call, one sweep."""
        return self._post(
            f"/v1/presets/{name}", cast_to=Sweep, body={"scale": scale}, headers=idempotency_header(idempotency_key)
        )


class AsyncPresets(AsyncAPIResource):
    """`Presets` for an AsyncClient: the same methods, awaited."""

    async def list(self) -> list[Preset]:
        return _presets(await self._get("/v1/presets", cast_to=dict))

    async def run(self, name: str, *, scale: Scale = "smoke", idempotency_key: str | None = None) -> Sweep:
        return await self._post(
            f"/v1/presets/{name}", cast_to=Sweep, body={"scale": scale}, headers=idempotency_header(idempotency_key)
        )
