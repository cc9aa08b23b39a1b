"""client.sweeps.list (sync and async) against the real service app on SQLite: pages, filters, summaries."""

from __future__ import annotations

import asyncio
import datetime as dt

import httpx

from ntklab.client import AsyncClient
from ntklab.resources import SweepSummary


def sweep_body(name: str, tags: list[str]) -> dict:
    return {
        "name": name,
        "tags": tags,
        "base": {"model": {"hidden": [4]}, "training": {"max_steps": 3}},
        "grid": {"model.hidden.0": [4, 8], "seed": [0, 1]},
    }


def test_list_pages_newest_first_and_filters(client):
    made = [client.sweeps.create(sweep_body(f"s{i}", ["mine"] if i % 2 else [])).id for i in range(5)]
    listed = list(client.sweeps.list(limit=2))
    assert [s.id for s in listed] == made[::-1], "three pages of two, read as one iterator"
    first = listed[0]
    assert isinstance(first, SweepSummary) and isinstance(first.created_at, dt.datetime)
    assert (first.status, first.total, first.counts["queued"], first.axes) == (
        "queued",
        4,
        4,
        ["model.hidden.0", "seed"],
    )
    assert not first.finished
    assert [s.id for s in client.sweeps.list(tag="mine")] == [made[3], made[1]]
    client.sweeps.cancel(made[3])
    assert [s.id for s in client.sweeps.list(status="cancelled")] == [made[3]]
    assert [s.id for s in client.sweeps.list(status=["cancelled", "queued"], tag="mine")] == [made[3], made[1]]


def test_the_async_twin(app):
    async def scenario() -> list[str]:
        transport = httpx.ASGITransport(app=app)
        async with AsyncClient(
            base_url="http://testserver", http_client=httpx.AsyncClient(transport=transport), max_retries=0
        ) as sdk:
            made = [(await sdk.sweeps.create(sweep_body(f"a{i}", ["async"]))).id for i in range(3)]
            listed = [s.id async for s in sdk.sweeps.list(tag="async", limit=2)]
            assert listed == made[::-1]
            return [s.status async for s in sdk.sweeps.list(status="queued")]

    assert asyncio.run(scenario()) == ["queued"] * 3
