"""`client.datasets`: upload your own arrays (numpy or torch), list, retrieve and delete them.

    dataset = client.datasets.upload(x, y, name="my-points")   # x [n, ...], y [n] or [n, O]
    client.datasets.upload("data.npz")                        # an .npz holding x and y
    job = client.jobs.create(data={"kind": "dataset", "id": dataset.id, "n_train": 256}, ...)

The arrays are sent as one uncompressed .npz (never a pickle); the service stores each
owner's identical arrays once, so uploading the same data again answers the same data set.
"""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
from pydantic import ConfigDict
from tenacity import AsyncRetrying, Retrying

from api_schemas import uploads as wire
from ntklab._http import _policy

if TYPE_CHECKING:
    from ntklab.client import AsyncClient, Client

OCTET_STREAM = "application/octet-stream"


class Dataset(wire.Dataset):
    """A data set as the service reports it (api_schemas.uploads.Dataset)."""

    model_config = ConfigDict(extra="allow")


DatasetRef = str | Dataset


def dataset_id(dataset: DatasetRef) -> str:
    return dataset.id if isinstance(dataset, Dataset) else dataset


def as_array(value: Any, name: str) -> np.ndarray:
    """A numpy array from a numpy array, a torch tensor (moved to the CPU) or anything array-like."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if array.dtype.kind not in "fiub":
        raise TypeError(f"{name} must hold floats or integers, not {array.dtype}")
    return array.astype(np.int64) if array.dtype.kind == "b" else array


def npz_body(x: Any, y: Any) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, x=np.ascontiguousarray(as_array(x, "x")), y=np.ascontiguousarray(as_array(y, "y")))
    return buffer.getvalue()


def upload_body(x: Any, y: Any) -> bytes:
    """The request body: a file's bytes (`x` a path to an .npz), or x and y packed as an .npz."""
    if isinstance(x, (str, os.PathLike)):
        if y is not None:
            raise TypeError("pass either a path to an .npz or the arrays x and y")
        with open(x, "rb") as file:
            return file.read()
    if y is None:
        raise TypeError("y is required with array x (or pass a path to an .npz holding x and y)")
    return npz_body(x, y)


def _upload_request(transport, path: str, body: bytes, name: str | None) -> httpx.Request:
    options = transport.options
    return transport.http.build_request(
        method="POST",
        url=options.url(path),
        params={"name": name} if name is not None else None,
        content=body,
        headers=options.headers("POST", {"Content-Type": OCTET_STREAM}),
        timeout=options.timeout,
    )


def send_upload(transport, path: str, body: bytes, name: str | None) -> httpx.Response:
    """POST raw bytes with the transport's retries (a retried upload finds the stored copy)."""
    request = _upload_request(transport, path, body, name)
    for attempt in Retrying(**_policy(transport.options.max_retries)):
        with attempt:
            response = transport._send(request)
    return response


async def send_upload_async(transport, path: str, body: bytes, name: str | None) -> httpx.Response:
    request = _upload_request(transport, path, body, name)
    async for attempt in AsyncRetrying(**_policy(transport.options.max_retries)):
        with attempt:
            response = await transport._send(request)
    return response


class Datasets:
    def __init__(self, client: Client) -> None:
        self._client = client

    def upload(self, x: Any, y: Any = None, /, *, name: str | None = None) -> Dataset:
        """Upload x [n, ...] and y [n] or [n, O] (numpy arrays or torch tensors), or the path of an .npz holding them."""
        response = send_upload(self._client._transport, "/v1/datasets", upload_body(x, y), name)
        return Dataset.model_validate(response.json())

    def retrieve(self, dataset: DatasetRef) -> Dataset:
        return Dataset.model_validate(self._client._transport.request("GET", f"/v1/datasets/{dataset_id(dataset)}").json())

    def list(self, *, limit: int | None = None) -> Iterator[Dataset]:
        """Every data set of this key, newest first, fetching pages of `limit` as it goes."""
        params: dict[str, Any] = {"limit": limit}
        while True:
            page = self._client._transport.request("GET", "/v1/datasets", params=params).json()
            yield from (Dataset.model_validate(item) for item in page["data"])
            if not page.get("has_more") or not page.get("next"):
                return
            params = {**params, "after": page["next"]}

    def delete(self, dataset: DatasetRef) -> None:
        """Delete the data set (a ConflictError while queued or running jobs use it)."""
        self._client._transport.request("DELETE", f"/v1/datasets/{dataset_id(dataset)}")


class AsyncDatasets:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def upload(self, x: Any, y: Any = None, /, *, name: str | None = None) -> Dataset:
        response = await send_upload_async(self._client._transport, "/v1/datasets", upload_body(x, y), name)
        return Dataset.model_validate(response.json())

    async def retrieve(self, dataset: DatasetRef) -> Dataset:
        response = await self._client._transport.request("GET", f"/v1/datasets/{dataset_id(dataset)}")
        return Dataset.model_validate(response.json())

    async def list(self, *, limit: int | None = None) -> AsyncIterator[Dataset]:
        params: dict[str, Any] = {"limit": limit}
        while True:
            page = (await self._client._transport.request("GET", "/v1/datasets", params=params)).json()
            for item in page["data"]:
                yield Dataset.model_validate(item)
            if not page.get("has_more") or not page.get("next"):
                return
            params = {**params, "after": page["next"]}

    async def delete(self, dataset: DatasetRef) -> None:
        await self._client._transport.request("DELETE", f"/v1/datasets/{dataset_id(dataset)}")
