"""/v1/datasets: upload (streamed, checked, stored once per content), list, retrieve, delete."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from ntklab.api_schemas.uploads import ArrayInfo, Dataset, DatasetPage
from ntklab.service.api.deps import OwnerDep, ScopeDep, SessionDep, SettingsDep, public_url
from ntklab.service.api.paging import DEFAULT_PAGE_SIZE
from ntklab.service.api.resources import as_utc
from ntklab.service.api.routes import PROBLEM, StrictJSONRoute
from ntklab.service.api.upload_docs import upload_body, upload_responses
from ntklab.service.api.upload_records import delete_unless_used, owned, page
from ntklab.service.storage_quota import refuse_if_full
from ntklab.service.upload_folders import temporary_folder
from ntklab.service.upload_storing import store_dataset
from ntklab.service.uploads import label_from, receive
from ntklab.store import models, uploads_repo

NOT_FOUND = {404: {**PROBLEM, "description": "no such data set (or not yours)"}}
UPLOAD_BODY = upload_body(
    "an .npz holding arrays x and y (np.savez), as the body or as multipart part `file`; "
    "or multipart parts `x` and `y`, one .npy each",
    {"file": ".npz with x and y", "x": ".npy, [points, ...]", "y": ".npy, [points] or [points, O]"},
)

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], route_class=StrictJSONRoute)


@router.post(
    "",
    status_code=201,
    response_model=Dataset,
    summary="Upload a data set",
    openapi_extra=UPLOAD_BODY,
    responses=upload_responses(
        Dataset,
        existed="the same arrays were uploaded before: that data set",
        too_large="the upload (or an array it declares or unpacks to) exceeds max_upload_bytes, "
        "or storing it would take the key past max_stored_bytes_per_key",
        invalid="not a valid data set: malformed file, dtype, shape, non-finite value or too many points",
    ),
)
async def upload_dataset(
    request: Request,
    response: Response,
    owner: OwnerDep,
    settings: SettingsDep,
    name: Annotated[str | None, Query(max_length=200, description="a label for the data set")] = None,
) -> Dataset:
    """Stream the upload to disk (never into memory), check it, store it once per content; 201, or 200 if it existed.

    Checks, each refused with a problem naming the array: dtypes float or integer; x at least
    2-D, y 1-D or 2-D, with the same number of rows; every value finite; points at most
    max_train_points (from the header, before any data is read); bytes at most max_upload_bytes;
    the key's stored bytes at most max_stored_bytes_per_key (service/storage_quota.py).
    No database session is open while the body arrives (service/uploads.py).
    """
    with request.app.state.upload_slots.hold(owner), temporary_folder(settings.upload_dir) as folder:
        await run_in_threadpool(refuse_if_full, request.app.state.sessions, owner, settings)
        received = await receive(
            request, Path(folder), settings.max_upload_bytes, parts=("file", "x", "y"), plain="file"
        )
        label = label_from(name, received)
        resource, created = await run_in_threadpool(
            store_dataset,
            received,
            Path(folder),
            request.app.state.sessions,
            owner,
            label,
            settings,
            dataset_resource,
        )
    response.status_code = 201 if created else 200
    response.headers["Location"] = f"{public_url(request)}/v1/datasets/{resource.id}"
    return resource


@router.get("", response_model=DatasetPage, summary="List data sets, newest first")
def list_datasets(
    session: SessionDep,
    scope: ScopeDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, description="page size, at most settings.max_page_size")] = DEFAULT_PAGE_SIZE,
    after: Annotated[str | None, Query(max_length=64, description="the `next` cursor of the previous page")] = None,
) -> DatasetPage:
    rows, has_more, next_cursor = page(session, models.Dataset, scope, settings, limit, after)
    hashes = uploads_repo.blob_hashes(session, [blob for row in rows for blob in (row.x_blob_id, row.y_blob_id)])
    return DatasetPage(data=[dataset_resource(row, hashes) for row in rows], has_more=has_more, next=next_cursor)


@router.get("/{dataset_id}", response_model=Dataset, responses=NOT_FOUND, summary="Retrieve a data set")
def retrieve_dataset(dataset_id: str, session: SessionDep, scope: ScopeDep) -> Dataset:
    row = owned(session, models.Dataset, scope, dataset_id, "data set")
    return dataset_resource(row, uploads_repo.blob_hashes(session, [row.x_blob_id, row.y_blob_id]))


@router.delete(
    "/{dataset_id}",
    status_code=204,
    response_class=Response,
    responses={**NOT_FOUND, 409: {**PROBLEM, "description": "queued or running jobs use the data set"}},
    summary="Delete a data set",
)
def delete_dataset(dataset_id: str, session: SessionDep, scope: ScopeDep) -> Response:
    row = owned(session, models.Dataset, scope, dataset_id, "data set")
    delete_unless_used(session, row, ("data", "id"), "data set")
    return Response(status_code=204)


def dataset_resource(row: models.Dataset, hashes: dict[str, str]) -> Dataset:
    return Dataset(
        id=row.id,
        name=row.name,
        points=row.points,
        x=ArrayInfo(shape=row.x_shape, dtype=row.x_dtype, sha256=hashes.get(row.x_blob_id, "")),
        y=ArrayInfo(shape=row.y_shape, dtype=row.y_dtype, sha256=hashes.get(row.y_blob_id, "")),
        size=row.size,
        created_at=as_utc(row.created_at),
    )
