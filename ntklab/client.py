"""`ntklab.Client` and `ntklab.AsyncClient`: one connection pool, five resources.

client = ntklab.Client()                      # NTKLAB_URL, NTKLAB_API_KEY from the environment
job = client.jobs.create("spec.yaml")
job = client.jobs.wait(job.id)
client.with_options(timeout=5, max_retries=0).jobs.retrieve(job.id)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import httpx

from ntklab._http import (
    DEFAULT_BASE_URL,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    AsyncTransport,
    Options,
    Transport,
)
from ntklab.resources import (
    AsyncDatasets,
    AsyncJobs,
    AsyncModels,
    AsyncPresets,
    AsyncSweeps,
    Datasets,
    Jobs,
    Models,
    Presets,
    Sweeps,
)

TimeoutLike = float | httpx.Timeout | None


def _options(base_url: str | None, api_key: str | None, timeout: TimeoutLike, max_retries: int) -> Options:
    return Options(
        base_url=base_url or os.environ.get("NTKLAB_URL") or DEFAULT_BASE_URL,
        api_key=api_key if api_key is not None else os.environ.get("NTKLAB_API_KEY"),
        timeout=timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout),
        max_retries=max_retries,
    )


def _changed(options: Options, overrides: Mapping[str, Any]) -> Options:
    unknown = set(overrides) - {field.name for field in dataclasses.fields(Options)}
    if unknown:
        raise TypeError(f"with_options() got unknown options {sorted(unknown)}")
    if "timeout" in overrides and not isinstance(overrides["timeout"], httpx.Timeout):
        overrides = {**overrides, "timeout": httpx.Timeout(overrides["timeout"])}
    return dataclasses.replace(options, **overrides)


class Client:
    """Synchronous client. Requests time out after `timeout` seconds and are retried
    `max_retries` times on connection errors, 429 and 5xx (see ntklab._http)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: TimeoutLike = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        *,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._attach(Transport(_options(base_url, api_key, timeout, max_retries), http_client or httpx.Client()))

    def _attach(self, transport: Transport) -> None:
        self.transport = transport
        self.jobs = Jobs(self)
        self.sweeps = Sweeps(self)
        self.presets = Presets(self)
        self.datasets = Datasets(self)
        self.models = Models(self)

    @property
    def base_url(self) -> str:
        return self.transport.options.base_url

    def with_options(self, **overrides: Any) -> Client:
        """A client sharing this one's connection pool with base_url, api_key, timeout or max_retries changed."""
        copy = object.__new__(Client)
        copy._attach(Transport(_changed(self.transport.options, overrides), self.transport.http))
        return copy

    def close(self) -> None:
        self.transport.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class AsyncClient:
    """The asynchronous twin of `Client`: the same resources and methods, each awaitable; `list` returns an
    AsyncPaginator (`await` it for the first page, `async for` over it for every item) and jobs are AsyncJobs
    (`await job.plot()`)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: TimeoutLike = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        *,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._attach(
            AsyncTransport(_options(base_url, api_key, timeout, max_retries), http_client or httpx.AsyncClient())
        )

    def _attach(self, transport: AsyncTransport) -> None:
        self.transport = transport
        self.jobs = AsyncJobs(self)
        self.sweeps = AsyncSweeps(self)
        self.presets = AsyncPresets(self)
        self.datasets = AsyncDatasets(self)
        self.models = AsyncModels(self)

    @property
    def base_url(self) -> str:
        return self.transport.options.base_url

    def with_options(self, **overrides: Any) -> AsyncClient:
        """`Client.with_options`: a client sharing this one's connection pool with options changed."""
        copy = object.__new__(AsyncClient)
        copy._attach(AsyncTransport(_changed(self.transport.options, overrides), self.transport.http))
        return copy

    async def close(self) -> None:
        await self.transport.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()
