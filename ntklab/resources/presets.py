"""`client.presets`: the paper's experiments, each a documented sweep at a chosen scale."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict

from api_schemas.sweeps import PresetInfo
from ntklab.resources.sweeps import Sweep, idempotency_header

if TYPE_CHECKING:
    from ntklab.client import AsyncClient, Client

Scale = Literal["smoke", "cpu", "paper"]


class Preset(PresetInfo):
    """One of the paper's experiments: name, title, the claim it checks, scales and job counts."""

    model_config = ConfigDict(extra="allow")


def _presets(page: dict[str, Any]) -> list[Preset]:
    return [Preset.model_validate(item) for item in page["data"]]


class Presets:
    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> list[Preset]:
        return _presets(self._client._transport.request("GET", "/v1/presets").json())

    def run(self, name: str, *, scale: Scale = "smoke", idempotency_key: str | None = None) -> Sweep:
        """Start the preset as a sweep; follow it with `client.sweeps.wait(sweep.id)`.

        Retries reuse one Idempotency-Key (yours, or one made for the call): one call, one sweep."""
        response = self._client._transport.request(
            "POST", f"/v1/presets/{name}", json={"scale": scale}, headers=idempotency_header(idempotency_key)
        )
        return Sweep.model_validate(response.json())


class AsyncPresets:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(self) -> list[Preset]:
        return _presets((await self._client._transport.request("GET", "/v1/presets")).json())

    async def run(self, name: str, *, scale: Scale = "smoke", idempotency_key: str | None = None) -> Sweep:
        response = await self._client._transport.request(
            "POST", f"/v1/presets/{name}", json={"scale": scale}, headers=idempotency_header(idempotency_key)
        )
        return Sweep.model_validate(response.json())
