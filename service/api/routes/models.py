"""/v1/models: upload an ONNX model (streamed, parsed, never run), list, retrieve, delete."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from ntklab.api_schemas.uploads import Model, ModelPage, TensorInfo, TrainableTensor
from ntklab.service.api.deps import OwnerDep, ScopeDep, SessionDep, SettingsDep, public_url
from ntklab.service.api.paging import DEFAULT_PAGE_SIZE
from ntklab.service.api.resources import as_utc
from ntklab.service.api.routes import PROBLEM, StrictJSONRoute
from ntklab.service.api.upload_docs import upload_body, upload_responses
from ntklab.service.api.upload_records import delete_unless_used, owned, page
from ntklab.service.storage_quota import refuse_if_full
from ntklab.service.upload_folders import temporary_folder
from ntklab.service.upload_storing import store_model
from ntklab.service.uploads import label_from, receive
from ntklab.store import models, uploads_repo

NOT_FOUND = {404: {**PROBLEM, "description": "no such model (or not yours)"}}
UPLOAD_BODY = upload_body(
    "an ONNX file (one protobuf, no external data), as the body or as multipart part `file`", {"file": None}
)

router = APIRouter(prefix="/v1/models", tags=["models"], route_class=StrictJSONRoute)


@router.post(
    "",
    status_code=201,
    response_model=Model,
    summary="Upload an ONNX model",
    openapi_extra=UPLOAD_BODY,
    responses=upload_responses(
        Model,
        existed="the same file was uploaded before: that model",
        too_large="the file (or a tensor it declares) exceeds max_upload_bytes, or storing it "
        "would take the key past max_stored_bytes_per_key",
        invalid="not an acceptable ONNX model: malformed, a pickle or checkpoint, external data, an unsupported operator",
    ),
)
async def upload_model(
    request: Request,
    response: Response,
    owner: OwnerDep,
    settings: SettingsDep,
    name: Annotated[str | None, Query(max_length=200, description="a label for the model")] = None,
) -> Model:
    """Stream the file to disk, parse the protobuf (nothing is run) and check it; 201, or 200 if it existed.

    The answer lists the model's input and output, its trainable parameter count and the
    operators it uses. Pickles and torch checkpoints (.pt, .pt2) are refused: loading them
    can run code. No database session is open until the file is on disk and checked
    (service/uploads.py).
    """
    with request.app.state.upload_slots.hold(owner), temporary_folder(settings.upload_dir) as folder:
        await run_in_threadpool(refuse_if_full, request.app.state.sessions, owner, settings)
        received = await receive(request, Path(folder), settings.max_upload_bytes, parts=("file",), plain="file")
        label = label_from(name, received)
        resource, created = await run_in_threadpool(
            store_model,
            received,
            request.app.state.sessions,
            request.app.state.model_checks,
            owner,
            label,
            settings,
            model_resource,
        )
    response.status_code = 201 if created else 200
    response.headers["Location"] = f"{public_url(request)}/v1/models/{resource.id}"
    return resource


@router.get("", response_model=ModelPage, summary="List models, newest first")
def list_models(
    session: SessionDep,
    scope: ScopeDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, description="page size, at most settings.max_page_size")] = DEFAULT_PAGE_SIZE,
    after: Annotated[str | None, Query(max_length=64, description="the `next` cursor of the previous page")] = None,
) -> ModelPage:
    rows, has_more, next_cursor = page(session, models.UploadedModel, scope, settings, limit, after)
    hashes = uploads_repo.blob_hashes(session, [row.blob_id for row in rows])
    return ModelPage(data=[model_resource(row, hashes) for row in rows], has_more=has_more, next=next_cursor)


@router.get("/{model_id}", response_model=Model, responses=NOT_FOUND, summary="Retrieve a model")
def retrieve_model(model_id: str, session: SessionDep, scope: ScopeDep) -> Model:
    row = owned(session, models.UploadedModel, scope, model_id, "model")
    return model_resource(row, uploads_repo.blob_hashes(session, [row.blob_id]))


@router.delete(
    "/{model_id}",
    status_code=204,
    response_class=Response,
    responses={**NOT_FOUND, 409: {**PROBLEM, "description": "queued or running jobs use the model"}},
    summary="Delete a model",
)
def delete_model(model_id: str, session: SessionDep, scope: ScopeDep) -> Response:
    row = owned(session, models.UploadedModel, scope, model_id, "model")
    delete_unless_used(session, row, ("model", "id"), "model")
    return Response(status_code=204)


def model_resource(row: models.UploadedModel, hashes: dict[str, str]) -> Model:
    return Model(
        id=row.id,
        name=row.name,
        sha256=hashes.get(row.blob_id, ""),
        size=row.size,
        parameters=row.parameters,
        trainable=None if row.trainable is None else [TrainableTensor(**tensor) for tensor in row.trainable],
        inputs=[TensorInfo(**tensor) for tensor in row.inputs],
        outputs=[TensorInfo(**tensor) for tensor in row.outputs],
        operators=row.operators,
        opset=row.opset,
        created_at=as_utc(row.created_at),
    )
