"""`client.presets`: the paper's experiments, each a documented sweep at a chosen scale."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ntklab.resources.sweeps import Sweep

if TYPE_CHECKING:
    from ntklab.client import AsyncClient, Client

Scale = Literal["smoke", "cpu", "paper"]


class Preset(BaseModel):
    """One of the paper's experiments: its name, what it shows, and the claim it checks."""

    model_config = ConfigDict(extra="allow")

    name: str
    title: str | None = None
    claim: str | None = None
    scales: list[str] = Field(default_factory=list)


def _presets(payload: Any) -> list[Preset]:
    items = payload["data"] if isinstance(payload, dict) else payload
    return [Preset.model_validate(item) for item in items]


class Presets:
    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> list[Preset]:
        return _presets(self._client._transport.request("GET", "/v1/presets").json())

    def run(self, name: str, *, scale: Scale = "smoke", **fields: Any) -> Sweep:
        """Start the preset as a sweep; follow it with `client.sweeps.wait(sweep.id)`."""
        response = self._client._transport.request("POST", f"/v1/presets/{name}", json={"scale": scale, **fields})
        return Sweep.model_validate(response.json())


class AsyncPresets:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(self) -> list[Preset]:
        return _presets((await self._client._transport.request("GET", "/v1/presets")).json())

    async def run(self, name: str, *, scale: Scale = "smoke", **fields: Any) -> Sweep:
        response = await self._client._transport.request(
            "POST", f"/v1/presets/{name}", json={"scale": scale, **fields}
        )
        return Sweep.model_validate(response.json())
