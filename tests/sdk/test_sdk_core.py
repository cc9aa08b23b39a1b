"""The SDK core against the real service app on SQLite (tests/sdk/conftest.py): cursor pages that page themselves,
an error's status as the server answered it, and the async client at parity with the sync one."""

from __future__ import annotations

import asyncio
import inspect

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from ntklab import errors
from ntklab.client import AsyncClient, Client
from ntklab.config.settings import Settings
from ntklab.pagination import AsyncPage, AsyncPaginator, LastPageError, Page
from ntklab.resources import AsyncJob, Job
from ntklab.service.app import create_app

SMALL = {"model": {"hidden": [8]}, "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}}


def test_a_page_holds_one_page_and_iterating_it_reads_every_page(client):
    made = [client.jobs.create(SMALL).id for _ in range(5)]
    newest_first = made[::-1]
    page = client.jobs.list(limit=2)
    assert isinstance(page, Page) and [job.id for job in page.items] == newest_first[:2] and page.has_next_page()
    pages = list(page.iter_pages())
    assert [[job.id for job in each.items] for each in pages] == [newest_first[:2], newest_first[2:4], newest_first[4:]]
    assert not pages[-1].has_next_page()
    with pytest.raises(LastPageError):
        pages[-1].next_page()
    assert [job.id for job in page] == newest_first, "iterating the first page walks every cursor"
    assert [job.id for job in client.jobs.list(limit=2).next_page()] == newest_first[2:]


def test_the_async_list_awaits_to_its_first_page_and_iterates_every_item(app):
    async def scenario() -> tuple[list[str], AsyncPage[AsyncJob], list[str], list[int]]:
        transport = httpx.ASGITransport(app=app)
        async with AsyncClient(
            base_url="http://testserver", http_client=httpx.AsyncClient(transport=transport), max_retries=0
        ) as sdk:
            made = [(await sdk.jobs.create(SMALL)).id for _ in range(3)]
            listing = sdk.jobs.list(limit=2)
            assert isinstance(listing, AsyncPaginator)
            first = await listing
            every = [job.id async for job in sdk.jobs.list(limit=2)]
            sizes = [len(page.items) async for page in first.iter_pages()]
            return made, first, every, sizes

    made, first, every, sizes = asyncio.run(scenario())
    assert isinstance(first, AsyncPage) and all(isinstance(job, AsyncJob) for job in first.items)
    assert [job.id for job in first.items] == made[::-1][:2] and every == made[::-1] and sizes == [2, 1]


def test_an_error_carries_the_status_the_server_answered(tmp_path, client):
    """The real app with its database out of reach answers 503: an InternalServerError whose status_code is 503."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/no-such-folder/ntklab.db",
        broker_dir=tmp_path / "broker",
        reaper_enabled=False,
    )
    with (
        TestClient(create_app(settings)) as http,
        Client(base_url="http://testserver", http_client=http, max_retries=0) as down,
    ):
        with pytest.raises(errors.InternalServerError) as unavailable:
            down.jobs.retrieve("job_1")
    assert unavailable.value.status_code == unavailable.value.status == 503
    assert unavailable.value.response.status_code == 503
    with pytest.raises(errors.NotFoundError) as missing:
        client.jobs.retrieve("job_does_not_exist")
    assert missing.value.status_code == 404


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith(("_", "model_"))
    }  # model_*: pydantic's own


def _twins() -> list[tuple[str, type, type]]:
    """Every resource of the sync client beside the async client's resource of the same name, walked from the
    clients themselves, plus the objects they return that call the service."""
    sync, asynchronous = Client(base_url="http://unused"), AsyncClient(base_url="http://unused")
    resources = [
        (name, type(value), type(getattr(asynchronous, name)))
        for name, value in vars(sync).items()
        if not name.startswith("_") and name != "transport"
    ]
    return [*resources, ("Client", Client, AsyncClient), ("Job", Job, AsyncJob), ("Page", Page, AsyncPage)]


SYNC_BY_DESIGN = {"with_options", "has_next_page"}
"""Methods that make no request, so neither twin awaits them."""


def _awaited(cls: type, method: str) -> bool:
    function = getattr(cls, method)
    pages = "AsyncPaginator" in str(inspect.signature(function).return_annotation)
    return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function) or pages


@pytest.mark.parametrize(("name", "sync", "asynchronous"), _twins(), ids=[twin[0] for twin in _twins()])
def test_the_async_client_has_every_method_of_the_sync_one_with_the_same_parameters(name, sync, asynchronous):
    """Same names, same parameters (names, kinds, defaults); each method the async twin defines itself is awaited
    (a coroutine, an async generator, or an AsyncPaginator to `await` or `async for`)."""
    synchronous_methods, async_methods = _public_methods(sync), _public_methods(asynchronous)
    assert set(synchronous_methods) <= set(async_methods), f"{asynchronous.__name__} lacks methods of {sync.__name__}"
    for method, signature in synchronous_methods.items():
        parameters = list(async_methods[method].parameters.values())
        assert parameters == list(signature.parameters.values()), f"{name}.{method}: other parameters"
        if method in vars(asynchronous) and method not in SYNC_BY_DESIGN:
            assert _awaited(asynchronous, method), f"{asynchronous.__name__}.{method} is not awaited"


SPEC = {
    "name": "sdk-core-plot",
    "model": {"hidden": [16]},
    "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4, "probe": {"n": 4}},
    "training": {"max_steps": 20, "target_loss": None},
}


@pytest.mark.slow
@pytest.mark.stack
def test_an_async_job_plots_itself_through_its_client(live_stack):
    async def scenario() -> tuple[AsyncJob, object, dict, AsyncJob]:
        async with AsyncClient(base_url=f"http://127.0.0.1:{live_stack.port}") as sdk:
            created = await sdk.jobs.create(SPEC)
            job = await sdk.jobs.wait(created, timeout=180, poll_interval=0.2, progress=False)
            figure = await job.plot()
            metrics = await sdk.jobs.metrics(job, ["loss"])
            listed = [each async for each in sdk.jobs.list(limit=1)][0]
            await listed.plot()
            return job, figure, metrics, listed

    job, figure, metrics, listed = asyncio.run(scenario())
    assert isinstance(job, AsyncJob) and job.status == "succeeded" and listed.id == job.id
    np.testing.assert_array_equal(figure.axes[1].lines[0].get_ydata(), metrics["loss"].value)
    assert figure.get_suptitle() == "sdk-core-plot"
