"""/v1/jobs/{id}/artifacts: list a job's artifacts; download one as a stream, whole or one byte range; its headers.

A download streams the artifact's blob (store/uploads_repo.stream_blob): chunk by chunk, each
read in a short session of its own, so the API holds at most one chunk (BLOB_CHUNK_BYTES) of it
at a time and no database connection while the client reads. The answer has `Content-Length`,
`ETag` (the SHA-256 of the content) and `Accept-Ranges: bytes`; `If-None-Match` → 304, `Range`
→ 206 with `Content-Range`, an unsatisfiable range → 416 (service/byte_ranges.py). An artifact
deleted (its job deleted) while it streams ends the connection early, short of its Content-Length.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import StreamingResponse

from ntklab.api_schemas.resources import ArtifactInfo, ArtifactList
from ntklab.service.api.deps import PublicUrlDep, ScopeDep, SessionDep
from ntklab.service.api.routes import PROBLEM, StrictJSONRoute
from ntklab.service.byte_ranges import Wanted, entity_tag, not_modified, wanted
from ntklab.service.problems import ProblemError
from ntklab.store import artifacts_repo, jobs_repo, uploads_repo
from ntklab.store.artifacts_repo import ArtifactEntry

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=StrictJSONRoute)

NOT_FOUND = {404: {**PROBLEM, "description": "no such job (or not yours), or no artifact of that name"}}
RANGE_NOT_SATISFIABLE = {
    416: {
        **PROBLEM,
        "description": "the Range starts past the end of the file or is malformed; Content-Range: bytes */size",
    }
}
FILE_HEADERS = {
    name: {"description": description, "schema": {"type": "string"}}
    for name, description in {
        "Content-Length": "bytes sent",
        "ETag": 'the content\'s SHA-256, quoted: "<sha256>"',
        "Accept-Ranges": "bytes",
        "Content-Disposition": "attachment; filename*=UTF-8''<name>",
    }.items()
}
RangeHeader = Annotated[
    str | None, Header(alias="Range", description="bytes=first-last, bytes=first- or bytes=-length")
]
IfRange = Annotated[
    str | None, Header(alias="If-Range", description="the ETag a Range is for; another → the whole file")
]
IfNoneMatch = Annotated[str | None, Header(alias="If-None-Match", description="ETags the client holds; a match → 304")]


@router.get("/{job_id}/artifacts", response_model=ArtifactList, responses=NOT_FOUND, summary="List artifacts")
def list_artifacts(job_id: str, session: SessionDep, scope: ScopeDep, public_url: PublicUrlDep) -> ArtifactList:
    job_id = _owned_job_id(session, scope, job_id)
    base = f"{public_url}/v1/jobs/{job_id}/artifacts/"
    return ArtifactList(
        data=[
            ArtifactInfo(
                name=entry.name,
                media_type=entry.media_type,
                size=entry.size,
                url=base + quote(entry.name, safe=""),
                created_at=entry.created_at,
            )
            for entry in artifacts_repo.entries(session, job_id)
        ]
    )


@router.get(
    "/{job_id}/artifacts/{name}",
    response_class=Response,
    responses={
        200: {
            "content": {"application/octet-stream": {}},
            "headers": FILE_HEADERS,
            "description": "the file, with its stored media type",
        },
        206: {
            "content": {"application/octet-stream": {}},
            "headers": FILE_HEADERS,
            "description": "the bytes the Range asked for; Content-Range: bytes first-last/size",
        },
        304: {"description": "If-None-Match named the ETag: the client's copy is current"},
        **NOT_FOUND,
        **RANGE_NOT_SATISFIABLE,
    },
    summary="Download an artifact",
)
def download_artifact(
    job_id: str,
    name: str,
    request: Request,
    session: SessionDep,
    scope: ScopeDep,
    range_header: RangeHeader = None,
    if_range: IfRange = None,
    if_none_match: IfNoneMatch = None,
) -> Response:
    """The artifact whose stored name equals `name` exactly (no path is ever built from it), streamed."""
    entry = _artifact(session, scope, job_id, name)
    etag = entity_tag(entry.sha256)
    if not_modified(if_none_match, etag):
        return Response(status_code=304, headers={"ETag": etag})
    part = wanted(entry.size, range_header, if_range, etag)
    chunks = uploads_repo.stream_blob(request.app.state.read_sessions, entry.blob_id, part.start, part.stop)
    return StreamingResponse(
        chunks,
        status_code=206 if part.partial else 200,
        media_type=entry.media_type,
        headers=_file_headers(entry, etag, part),
    )


@router.head(
    "/{job_id}/artifacts/{name}",
    response_class=Response,
    responses={
        200: {"headers": FILE_HEADERS, "description": "the headers a whole download would have, no body"},
        **NOT_FOUND,
    },
    summary="An artifact's type and size",
)
def artifact_headers(job_id: str, name: str, session: SessionDep, scope: ScopeDep) -> Response:
    """What GET would answer for the whole file, without the bytes (which are not read)."""
    entry = _artifact(session, scope, job_id, name)
    etag = entity_tag(entry.sha256)
    return Response(
        media_type=entry.media_type, headers=_file_headers(entry, etag, Wanted(0, entry.size, entry.size, False))
    )


def _owned_job_id(session, scope: str | None, job_id: str) -> str:
    job = jobs_repo.get_job(session, scope, job_id)
    if job is None:
        raise ProblemError(404, "no such job")
    return job.id


def _artifact(session, scope: str | None, job_id: str, name: str) -> ArtifactEntry:
    entry = artifacts_repo.find(session, _owned_job_id(session, scope, job_id), name)
    if entry is None:
        raise ProblemError(404, "this job has no artifact of that name")
    return entry


def _file_headers(entry: ArtifactEntry, etag: str, part: Wanted) -> dict[str, str]:
    headers = {
        "Content-Length": str(part.stop - part.start),
        "ETag": etag,
        "Accept-Ranges": "bytes",
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(entry.name, safe='')}",
    }
    return headers | ({"Content-Range": part.content_range} if part.partial else {})
