"""The base of every resource: requests by path through the client's public transport, answers cast to a type.

    class Datasets(SyncAPIResource):
        def retrieve(self, dataset_id: str) -> Dataset:
            return self._get(f"/v1/datasets/{dataset_id}", cast_to=Dataset)

`cast_to` is a pydantic model (validated from the JSON body), `bytes` (the body), `httpx.Response`
(the answer itself, for its headers) or `dict`/`list` (the JSON as parsed). Uploads (`_upload`)
send raw bytes through the same `transport.request` as every other call, so they are retried
the same way and carry the same headers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

import httpx
from pydantic import BaseModel

from ntklab.pagination import AsyncPage, AsyncPaginator, CursorPage, Page

if TYPE_CHECKING:
    from ntklab.client import AsyncClient, Client

T = TypeVar("T")
OCTET_STREAM = {"Content-Type": "application/octet-stream"}
Params = Mapping[str, Any]


def parse(response: httpx.Response, cast_to: type[T]) -> T:
    """The answer as `cast_to`: a validated model, the body's bytes, the response itself, or the parsed JSON."""
    if cast_to is httpx.Response:
        return cast(T, response)
    if cast_to is bytes:
        return cast(T, response.content)
    if isinstance(cast_to, type) and issubclass(cast_to, BaseModel):
        return cast(T, cast_to.model_validate(response.json()))
    return cast(T, response.json())


def _after(params: Params, cursor: str) -> dict[str, Any]:
    return {**params, "after": cursor}


class SyncAPIResource:
    """A resource of a `Client`: `_get`, `_post`, `_delete`, `_upload` and `_get_page` by path."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def _get(self, path: str, *, cast_to: type[T], params: Params | None = None) -> T:
        return parse(self._client.transport.request("GET", path, params=params), cast_to)

    def _post(
        self,
        path: str,
        *,
        cast_to: type[T],
        body: Any = None,
        params: Params | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> T:
        return parse(self._client.transport.request("POST", path, json=body, params=params, headers=headers), cast_to)

    def _delete(self, path: str) -> None:
        self._client.transport.request("DELETE", path)

    def _upload(self, path: str, content: bytes, *, cast_to: type[T], params: Params | None = None) -> T:
        """POST raw bytes (a retried upload finds the copy the first attempt stored)."""
        response = self._client.transport.request("POST", path, content=content, params=params, headers=OCTET_STREAM)
        return parse(response, cast_to)

    def _get_page(self, path: str, *, item: Callable[[Any], T], params: Params) -> Page[T]:
        """The page of `path` at `params` (its `after` the cursor), each wire item turned into a T by `item`."""
        wire = self._get(path, cast_to=CursorPage, params=params)
        return Page(
            [item(each) for each in wire.data],
            wire.cursor,
            lambda cursor: self._get_page(path, item=item, params=_after(params, cursor)),
        )


class AsyncAPIResource:
    """`SyncAPIResource` for an `AsyncClient`: the same methods, awaited; `_list` makes an `AsyncPaginator`."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def _get(self, path: str, *, cast_to: type[T], params: Params | None = None) -> T:
        return parse(await self._client.transport.request("GET", path, params=params), cast_to)

    async def _post(
        self,
        path: str,
        *,
        cast_to: type[T],
        body: Any = None,
        params: Params | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> T:
        response = await self._client.transport.request("POST", path, json=body, params=params, headers=headers)
        return parse(response, cast_to)

    async def _delete(self, path: str) -> None:
        await self._client.transport.request("DELETE", path)

    async def _upload(self, path: str, content: bytes, *, cast_to: type[T], params: Params | None = None) -> T:
        response = await self._client.transport.request(
            "POST", path, content=content, params=params, headers=OCTET_STREAM
        )
        return parse(response, cast_to)

    async def _get_page(self, path: str, *, item: Callable[[Any], T], params: Params) -> AsyncPage[T]:
        wire = await self._get(path, cast_to=CursorPage, params=params)

        async def fetch(cursor: str) -> AsyncPage[T]:
            return await self._get_page(path, item=item, params=_after(params, cursor))

        return AsyncPage([item(each) for each in wire.data], wire.cursor, fetch)

    def _list(self, path: str, *, item: Callable[[Any], T], params: Params) -> AsyncPaginator[T]:
        return AsyncPaginator(lambda: self._get_page(path, item=item, params=params))
