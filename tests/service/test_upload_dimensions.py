"""An uploaded array with more dimensions than numpy holds (64) is a 422 naming the array and the limit, float or
integer, .npy or .npz, and nothing is stored (issue 25, item 10).

Before, the header passed its checks: a float x then failed in numpy's memory map (a 500) and an
integer x, whose values are never mapped, was stored, for every job on it to fail in the worker.
"""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from ntklab.service.array_upload import MAX_ARRAY_DIMENSIONS
from tests.service.test_datasets_api import npy, npy_header, stored_rows, upload, upload_pair

PROBLEM = "application/problem+json"


def x_with(dimensions: int, descr: str) -> bytes:
    """x [2, 1, …, 1, 3]: 6 values whatever the number of dimensions, so only the count is wrong."""
    shape = (2, *(1,) * (dimensions - 2), 3)
    itemsize = np.dtype(descr).itemsize
    return npy_header(shape, descr) + np.arange(6).astype(descr).tobytes()[: 6 * itemsize]


@pytest.mark.parametrize("descr", ["<f8", "<f4", "<i8", "|u1"])
@pytest.mark.parametrize("container", ["npy", "npz"])
def test_more_dimensions_than_numpy_holds_is_a_422_naming_x_and_the_limit(client, descr, container):
    x, y = x_with(MAX_ARRAY_DIMENSIONS + 1, descr), npy(np.zeros(2))
    if container == "npy":
        answer = upload_pair(client, x, y)
    else:
        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w") as zipped:
            zipped.writestr("x.npy", x)
            zipped.writestr("y.npy", y)
        answer = upload(client, archive.getvalue())
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == PROBLEM
    (error,) = answer.json()["errors"]
    assert (
        error["field"] == "x" and error["limit"] == MAX_ARRAY_DIMENSIONS and error["value"] == MAX_ARRAY_DIMENSIONS + 1
    )
    assert f"at most {MAX_ARRAY_DIMENSIONS}" in error["message"]
    assert stored_rows(client) == (0, 0, 0)


@pytest.mark.parametrize("descr", ["<f8", "<i8"])
def test_exactly_as_many_dimensions_as_numpy_holds_is_stored(client, descr):
    answer = upload_pair(client, x_with(MAX_ARRAY_DIMENSIONS, descr), npy(np.zeros(2)))
    assert answer.status_code == 201, answer.text
    assert len(answer.json()["x"]["shape"]) == MAX_ARRAY_DIMENSIONS
