"""Receiving an upload, and looking up the uploads a job spec names.

The request body is streamed to files, hashed and counted, never held in memory:

    POST /v1/datasets, /v1/models   Content-Type: multipart/form-data  → one file per named part
                                    any other type (application/octet-stream, …) → the body is one file

Each file is written to the upload's own folder (service/upload_folders.py: named after the API
process, so one a crash leaves behind is removed at the next start-up) as its bytes arrive,
with its SHA-256 and size;
the whole body counts against `settings.max_upload_bytes` (413 the moment it goes over,
and at once when Content-Length declares more). These paths are exempt from the buffering
of `ntklab.service.caps.BodySizeLimit` (see UPLOAD_PATHS), and their body is timed against
`upload_deadline_s` and the minimum rate (service/body_timing.py: 408).

No database session is open while the body arrives: the key check closes its own before
the route runs, and the routes open theirs only once the files are on disk and checked.
Each key has at most `max_concurrent_uploads_per_key` uploads in progress in one API
process (`UploadSlots`, taken before the body is read; 429 over it), so one key's stalled
or slow uploads cannot fill the temporary disk or the threads that check uploads.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import math
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pydantic import ValidationError
from python_multipart.multipart import MultipartParser, parse_options_header
from sqlalchemy.orm import Session
from starlette.requests import ClientDisconnect, Request

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.base import MAX_NAME_LENGTH, text_problem
from ntklab.api_schemas.problems import FieldError
from ntklab.api_schemas.spec import AnyModel, DatasetData, JobSpec, StoredDataset, input_dim, takes_integer_inputs
from ntklab.api_schemas.uploads import INVALID_UPLOAD
from ntklab.service.problems import ProblemError, field_errors, summarize
from ntklab.store import uploads_repo
from ntklab.store.models import Dataset, UploadedModel

UPLOAD_PATHS = frozenset({"/v1/datasets", "/v1/models"})
MAX_TEXT_FIELD_BYTES = 1000


@dataclass
class ReceivedFile:
    path: Path
    size: int = 0
    sha256: str = ""
    filename: str | None = None


@dataclass
class Received:
    """The files of an upload by part name ("file" for a plain body) and its short text fields."""

    files: dict[str, ReceivedFile] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)


def too_large(size: int, limit: int, verb: str) -> ProblemError:
    message = f"the upload {verb} {size} bytes; the cap is {limit} (setting max_upload_bytes)"
    return ProblemError(
        413,
        message,
        type=types.BODY_TOO_LARGE,
        title="Upload too large",
        errors=[FieldError(field="body", message=message, limit=limit, value=size)],
        headers={"Connection": "close"},
    )


def invalid(
    field_name: str, message: str, *, value: str | int | None = None, type: str = INVALID_UPLOAD
) -> ProblemError:
    return ProblemError(
        422,
        f"{field_name}: {message}",
        type=type,
        title="Upload refused",
        errors=[FieldError(field=field_name, message=message, value=value)],
    )


DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


@contextlib.contextmanager
def upload_disk() -> Iterator[None]:
    """Writes to the upload's temporary folder: a full disk (or quota) there is the server's fault, a 507 naming
    the folder's setting, never a 500 or a 422 that blames the client."""
    try:
        yield
    except OSError as error:
        if error.errno not in DISK_FULL:
            raise
        message = (
            f"the server's temporary disk for uploads is full ({error.strerror}); nothing was stored; "
            "send it again later (setting upload_dir names the folder)"
        )
        raise ProblemError(
            507,
            message,
            type=types.INSUFFICIENT_STORAGE,
            title="Insufficient storage",
            errors=[FieldError(field="upload_dir", message=message)],
            headers={"Connection": "close"},
        ) from None


class _Writer:
    """One file being received: written and hashed chunk by chunk (a full disk: upload_disk's 507)."""

    def __init__(self, path: Path, filename: str | None) -> None:
        self.file = ReceivedFile(path, filename=filename)
        with upload_disk():
            self._out: BinaryIO = open(path, "wb")
        self._hash = hashlib.sha256()

    def write(self, data: bytes) -> None:
        with upload_disk():
            self._out.write(data)
        self._hash.update(data)
        self.file.size += len(data)

    def close(self) -> ReceivedFile:
        if not self._out.closed:
            try:
                with upload_disk():
                    self._out.close()
            finally:
                self.file.sha256 = self._hash.hexdigest()
        return self.file


async def receive(request: Request, folder: Path, limit: int, *, parts: tuple[str, ...], plain: str) -> Received:
    """Stream the body into `folder`: multipart parts named in `parts`, or the whole body as part `plain`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(int(declared), limit, "declares")
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    chunks = _counted(request, limit)
    if content_type == b"multipart/form-data":
        boundary = options.get(b"boundary")
        if not boundary:
            raise invalid("content-type", "multipart/form-data needs a boundary parameter")
        return await _multipart(chunks, boundary, folder, parts)
    writer = _Writer(folder / plain, None)
    try:
        async for chunk in chunks:
            writer.write(chunk)
    finally:
        writer.close()
    received = Received(files={plain: writer.file})
    if writer.file.size == 0:
        raise invalid(plain, "the body is empty; send the file as the request body or as multipart/form-data")
    return received


async def _counted(request: Request, limit: int) -> AsyncIterator[bytes]:
    total = 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise too_large(total, limit, "sent at least")
            if chunk:
                yield chunk
    except ClientDisconnect:
        raise ProblemError(400, "the client closed the connection before the upload ended") from None


async def _multipart(chunks: AsyncIterator[bytes], boundary: bytes, folder: Path, parts: tuple[str, ...]) -> Received:
    received = Received()
    state: dict = {"headers": {}, "field": b"", "value": b"", "writer": None, "text": None, "name": None}
    errors: list[ProblemError] = []

    def on_header_field(data: bytes, start: int, end: int) -> None:
        state["field"] += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        state["value"] += data[start:end]

    def on_header_end() -> None:
        state["headers"][state["field"].lower()] = state["value"]
        state["field"], state["value"] = b"", b""

    def on_headers_finished() -> None:
        _, disposition = parse_options_header(state["headers"].get(b"content-disposition", b""))
        name = disposition.get(b"name", b"").decode("utf-8", "replace")
        filename = disposition.get(b"filename")
        state["headers"], state["name"] = {}, name
        if filename is None:
            if name != "name":
                errors.append(
                    invalid(name or "multipart", f"unexpected form field {name!r}; send the arrays as file parts")
                )
            state["text"] = bytearray()
            return
        if name not in parts:
            errors.append(
                invalid(name or "multipart", f"unexpected file part {name!r}; expected {' and '.join(parts)}")
            )
        elif name in received.files:
            errors.append(invalid(name, f"the file part {name!r} was sent twice"))
        else:
            state["writer"] = _Writer(folder / name, filename.decode("utf-8", "replace"))

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if state["writer"] is not None:
            state["writer"].write(data[start:end])
        elif state["text"] is not None:
            state["text"] += data[start:end]
            if len(state["text"]) > MAX_TEXT_FIELD_BYTES:
                errors.append(invalid(state["name"], f"longer than {MAX_TEXT_FIELD_BYTES} bytes"))
                state["text"] = None

    def on_part_end() -> None:
        if state["writer"] is not None:
            written = state["writer"].close()
            received.files[state["name"]] = written
        elif state["text"] is not None:
            received.fields[state["name"]] = state["text"].decode("utf-8", "replace")
        state["writer"], state["text"] = None, None

    parser = MultipartParser(
        boundary,
        {
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_headers_finished": on_headers_finished,
            "on_part_data": on_part_data,
            "on_part_end": on_part_end,
        },
    )
    try:
        async for chunk in chunks:
            parser.write(chunk)
            if errors:
                raise errors[0]
        parser.finalize()
    except ProblemError:
        raise
    except Exception as error:  # python_multipart's parse errors
        raise invalid("body", f"malformed multipart/form-data: {error}") from None
    finally:
        if state["writer"] is not None:
            state["writer"].close()
    if errors:
        raise errors[0]
    return received


class UploadSlots:
    """Uploads in progress per owner in this API process, at most `limit` each (thread-safe)."""

    def __init__(self, limit: int, retry_after_s: int) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self, owner: str) -> Iterator[None]:
        """One of the owner's slots for the block; 429 naming `concurrent_uploads` when all are taken."""
        with self._lock:
            held = self._held.get(owner, 0)
            if held >= self.limit:
                raise self._refusal()
            self._held[owner] = held + 1
        try:
            yield
        finally:
            with self._lock:
                self._held[owner] -= 1
                if not self._held[owner]:
                    del self._held[owner]

    def held(self, owner: str) -> int:
        with self._lock:
            return self._held.get(owner, 0)

    def _refusal(self) -> ProblemError:
        message = (
            f"this key already has {self.limit} uploads in progress (setting max_concurrent_uploads_per_key); "
            "send the next when one has been answered"
        )
        return ProblemError(
            429,
            f"{message}; retry after {self.retry_after_s} s",
            type=types.RATE_LIMITED,
            title="Too many requests",
            errors=[FieldError(field="concurrent_uploads", message=message, limit=self.limit)],
            headers={"Retry-After": str(self.retry_after_s), "Connection": "close"},
        )


# --------------------------------------------------------------------------- jobs that name an upload


def resolve_uploads(spec: JobSpec, session: Session, owner: str) -> JobSpec:
    """The spec with its uploads looked up (the owner's own only) and `stored` filled in; 422 naming the field otherwise.

    data.kind = "dataset": n_train defaults to every stored point and must not exceed them;
    standardize is refused for integer x (token ids); integer class labels y must lie in [0, output width). model.kind = "onnx": the data's points
    must fit the model's input, and model.output_dim comes from the model's output width.
    The filled-in spec is validated again, so every rule of JobSpec applies to the stored shapes.
    """
    uses_dataset = isinstance(spec.data, DatasetData)
    if not uses_dataset and spec.model.kind != "onnx":
        return spec
    document = spec.model_dump(mode="json")
    errors: list[FieldError] = []
    point_shape: tuple[int, ...] | None = None
    x_integer = False
    if uses_dataset:
        point_shape, x_integer = _resolve_dataset(spec.data, document["data"], session, owner, errors)
    if spec.model.kind == "onnx" and not errors:
        if point_shape is None:
            point_shape = tuple(spec.image_shape() or (input_dim(spec.data),))
        _resolve_model(spec.model, document["model"], session, owner, point_shape, x_integer, errors)
        if uses_dataset and not errors:
            _check_token_ids(document["data"]["stored"], document["model"]["stored"], spec.data.id, errors)
    if uses_dataset and not errors:
        _check_labels(document["data"]["stored"], _output_dim(document["model"]), spec.data.id, errors)
    if x_integer and spec.data.standardize and _keeps_integers(spec.model, document["model"]):
        errors.append(
            FieldError(
                field="data.standardize",
                message=f"data set {spec.data.id} has integer x (token ids for "
                f"this {spec.model.kind} model); standardize applies to float inputs only",
                value=True,
            )
        )
    if errors:
        raise ProblemError(
            422, summarize(errors), type=types.VALIDATION, title="Request failed validation", errors=errors
        )
    try:
        return JobSpec.model_validate(document)
    except ValidationError as error:
        located = [{**entry, "loc": ("body", *entry["loc"])} for entry in error.errors()]
        found = field_errors(located, document)
        raise ProblemError(
            422, summarize(found), type=types.VALIDATION, title="Request failed validation", errors=found
        ) from None


def _resolve_dataset(data: DatasetData, document: dict, session: Session, owner: str, errors: list[FieldError]):
    row = uploads_repo.get(session, Dataset, owner, data.id)
    if row is None:
        errors.append(FieldError(field="data.id", message=f"no data set {data.id} (or not yours)", value=data.id))
        return None, False
    n_train = data.n_train if data.n_train is not None else row.points
    if n_train > row.points:
        errors.append(
            FieldError(
                field="data.n_train",
                message=f"data.n_train = {n_train} exceeds the {row.points} points of data set {row.id}",
                limit=row.points,
                value=n_train,
            )
        )
    x_integer = row.x_dtype.startswith(("int", "uint"))
    y_width = row.y_shape[1] if len(row.y_shape) == 2 else 1
    document["n_train"] = n_train
    document["stored"] = {
        "points": row.points,
        "x_shape": row.x_shape[1:],
        "x_integer": x_integer,
        "y_width": y_width,
        "x_min": row.x_min,
        "x_max": row.x_max,
        "y_integer": row.y_dtype.startswith(("int", "uint")),
        "y_min": row.y_min,
        "y_max": row.y_max,
    }
    return tuple(row.x_shape[1:]), x_integer


def _resolve_model(
    model,
    document: dict,
    session: Session,
    owner: str,
    point_shape: tuple[int, ...],
    x_integer: bool,
    errors: list[FieldError],
) -> None:
    row = uploads_repo.get(session, UploadedModel, owner, model.id)
    if row is None:
        errors.append(FieldError(field="model.id", message=f"no model {model.id} (or not yours)", value=model.id))
        return
    wanted, answer = row.inputs[0], row.outputs[0]
    dims = wanted["shape"][1:]
    if all(isinstance(dim, int) for dim in dims):
        fits = math.prod(dims) == math.prod(point_shape)
        input_shape = list(dims)
    else:
        fits = len(dims) == len(point_shape) and all(
            not isinstance(d, int) or d == n for d, n in zip(dims, point_shape)
        )
        input_shape = list(point_shape)
    if not fits:
        errors.append(
            FieldError(
                field="model.id",
                message=f"model {row.id} takes inputs of shape {dims} per point; "
                f"the data's points have shape {list(point_shape)}",
            )
        )
    if wanted["dtype"].startswith("int") and not x_integer:
        errors.append(
            FieldError(
                field="model.id",
                message=f"model {row.id} takes integer inputs ({wanted['dtype']}); the data's x is floating-point",
            )
        )
    document["stored"] = {
        "parameters": row.parameters,
        "input_shape": input_shape,
        "output_dim": answer["shape"][1],
        "input_integer": wanted["dtype"].startswith("int"),
        "activation_elements": row.activation_elements,
        "forward_flops": row.forward_flops,
        "constant_bytes": row.constant_bytes,
        "constant_elements": row.constant_elements,
        "folding_flops": row.folding_flops,
        "fixed_elements": row.fixed_elements,
        "fixed_flops": row.fixed_flops,
        "input_vocabulary": row.input_vocabulary,
        "nodes": row.nodes,
    }


def _check_token_ids(data: dict, model: dict, data_id: str, errors: list[FieldError]) -> None:
    """A data set's integer ids must index the model's embedding: [x_min, x_max] within [0, input_vocabulary)."""
    vocabulary, low, high = model.get("input_vocabulary"), data.get("x_min"), data.get("x_max")
    if vocabulary is None or low is None or high is None or (low >= 0 and high < vocabulary):
        return
    value = high if high >= vocabulary else low
    errors.append(
        FieldError(
            field="data.id",
            message=f"data set {data_id} holds token ids from {low} to {high}; the "
            f"model's embedding takes ids in [0, {vocabulary})",
            limit=vocabulary,
            value=value,
        )
    )


def _output_dim(model: dict) -> int | None:
    """The model's output width as far as the request fixes it: the onnx model's, or model.output_dim (None: default)."""
    return (model.get("stored") or {}).get("output_dim") or model.get("output_dim")


def _check_labels(data: dict, classes: int | None, data_id: str, errors: list[FieldError]) -> None:
    """A data set's class labels (integer y in one column) must index the model's outputs: [y_min, y_max] within
    [0, C) with C the output width (default y_max + 1, so only a negative label is out of range then)."""
    low, high = data.get("y_min"), data.get("y_max")
    if not StoredDataset.model_validate(data).class_labels() or low is None or high is None:
        return
    limit = classes if classes is not None else high + 1
    if low >= 0 and high < limit:
        return
    value = low if low < 0 else high
    errors.append(
        FieldError(
            field="data.id",
            message=f"data set {data_id} holds class labels y from {low} to {high}; "
            f"the model's {limit} outputs take labels in [0, {limit})",
            limit=limit,
            value=value,
        )
    )


def _keeps_integers(model: AnyModel, document: dict) -> bool:
    if model.kind == "onnx":
        return bool((document.get("stored") or {}).get("input_integer"))
    return takes_integer_inputs(model)


def label_from(name: str | None, received: Received) -> str | None:
    """The upload's name (query, else multipart field): stored text (ntklab.api_schemas.base) of at most MAX_NAME_LENGTH characters."""
    label = name if name is not None else received.fields.get("name")
    if label is None:
        return None
    if len(label) > MAX_NAME_LENGTH:
        raise invalid("name", f"at most {MAX_NAME_LENGTH} characters", type=types.VALIDATION)
    if (problem := text_problem(label)) is not None:
        raise invalid("name", problem, type=types.VALIDATION)
    return label
