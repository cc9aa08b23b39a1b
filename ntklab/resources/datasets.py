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
from typing import Any

import numpy as np
from pydantic import ConfigDict

from ntklab._resource import AsyncAPIResource, SyncAPIResource
from ntklab.api_schemas import uploads as wire
from ntklab.pagination import AsyncPaginator, Page


class Dataset(wire.Dataset):
    """A data set as the service reports it (ntklab.api_schemas.uploads.Dataset)."""

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


def _params(name: str | None) -> dict[str, Any]:
    return {"name": name}


class Datasets(SyncAPIResource):
    def upload(self, x: Any, y: Any = None, /, *, name: str | None = None) -> Dataset:
        """Upload x [n, ...] and y [n] or [n, O] (numpy arrays or torch tensors), or the path of an .npz holding them.

        Retried like every request; a retried upload answers the data set the first attempt stored."""
        return self._upload("/v1/datasets", upload_body(x, y), cast_to=Dataset, params=_params(name))

    def retrieve(self, dataset: DatasetRef) -> Dataset:
        return self._get(f"/v1/datasets/{dataset_id(dataset)}", cast_to=Dataset)

    def list(self, *, limit: int | None = None) -> Page[Dataset]:
        """The first page of this key's data sets, newest first; iterating it yields every one, fetching pages
        of `limit` as it goes."""
        return self._get_page("/v1/datasets", item=Dataset.model_validate, params={"limit": limit})

    def delete(self, dataset: DatasetRef) -> None:
        """Delete the data set (a ConflictError while queued or running jobs use it)."""
        self._delete(f"/v1/datasets/{dataset_id(dataset)}")


class AsyncDatasets(AsyncAPIResource):
    """`Datasets` for an AsyncClient: the same methods, awaited."""

    async def upload(self, x: Any, y: Any = None, /, *, name: str | None = None) -> Dataset:
        return await self._upload("/v1/datasets", upload_body(x, y), cast_to=Dataset, params=_params(name))

    async def retrieve(self, dataset: DatasetRef) -> Dataset:
        return await self._get(f"/v1/datasets/{dataset_id(dataset)}", cast_to=Dataset)

    def list(self, *, limit: int | None = None) -> AsyncPaginator[Dataset]:
        return self._list("/v1/datasets", item=Dataset.model_validate, params={"limit": limit})

    async def delete(self, dataset: DatasetRef) -> None:
        await self._delete(f"/v1/datasets/{dataset_id(dataset)}")
