"""Storing a checked upload, a data set or an ONNX model, once per content and owner, in a session opened here.

The body is all on disk by now (service/uploads.py): the files are checked first (service/array_upload.py,
service/onnx_upload.py in its turn, service/model_checks.py), then their bytes reserved against the owner's
storage quota (service/storage_quota.py), their blobs saved and the row inserted, or the owner's row of the
same content found (`created` False: the route's 200). Two uploads of the same content racing: the loser's
insert violates a unique constraint, and it tries once more, finding the winner's row.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ntklab.config.settings import Settings
from ntklab.service.array_upload import CheckedDataset, check_dataset
from ntklab.service.model_checks import ModelChecks
from ntklab.service.onnx_upload import check_onnx
from ntklab.service.storage_quota import reserve
from ntklab.service.uploads import Received, invalid
from ntklab.store import models, uploads_repo
from ntklab.store.db import ConstraintViolation, violations_raised

Shown = TypeVar("Shown")
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".pt2", ".pkl", ".pickle", ".ckpt", ".bin")


def store_dataset(
    received: Received,
    folder: Path,
    sessions,
    owner: str,
    name: str | None,
    settings: Settings,
    shown: Callable[[models.Dataset, dict[str, str]], Shown],
) -> tuple[Shown, bool]:
    """Check the data set's files and store them: (shown(row, {blob id: sha256}), created)."""
    checked = check_dataset(received, folder, settings)
    contents = [(checked.x.sha256, checked.x.size), (checked.y.sha256, checked.y.size)]

    def store(session) -> tuple[models.Dataset, bool]:
        reserve(session, owner, contents, settings)
        return _store_dataset(session, owner, name, checked)

    return _stored_once(sessions, store, lambda row: [row.x_blob_id, row.y_blob_id], shown)


def store_model(
    received: Received,
    sessions,
    checks: ModelChecks,
    owner: str,
    name: str | None,
    settings: Settings,
    shown: Callable[[models.UploadedModel, dict[str, str]], Shown],
) -> tuple[Shown, bool]:
    """Check the ONNX file (in its turn: service/model_checks.py) and store it: (shown(row, {blob id: sha256}), created)."""
    file = received.files.get("file")
    if file is None:
        raise invalid("file", "send the ONNX file as the body or as multipart part `file`")
    if file.filename and file.filename.lower().endswith(CHECKPOINT_SUFFIXES):
        raise invalid(
            "file",
            f"{file.filename!r} looks like a torch checkpoint or pickle; ntklab takes ONNX files only, "
            "because loading a checkpoint can run code (export with torch.onnx.export)",
        )
    with checks.turn(file.size):
        checked = check_onnx(file.path, settings)

    def store(session) -> tuple[models.UploadedModel, bool]:
        reserve(session, owner, [(file.sha256, file.size)], settings)
        blob = uploads_repo.save_blob(session, owner, file.sha256, file.size, file.path)
        existing = uploads_repo.find_model(session, owner, blob)
        if existing is not None:
            session.commit()
            return existing, False
        row = models.UploadedModel(
            id=models.new_id("mdl"),
            owner=owner,
            name=name,
            blob_id=blob,
            format="onnx",
            parameters=checked.parameters,
            trainable=checked.trainable,
            inputs=checked.inputs,
            outputs=checked.outputs,
            operators=checked.operators,
            opset=checked.opset,
            size=file.size,
            created_at=models.utcnow(),
            activation_elements=checked.activation_elements,
            forward_flops=checked.forward_flops,
            constant_bytes=checked.constant_bytes,
            constant_elements=checked.constant_elements,
            folding_flops=checked.folding_flops,
            fixed_elements=checked.fixed_elements,
            fixed_flops=checked.fixed_flops,
            input_vocabulary=checked.input_vocabulary,
            nodes=checked.nodes,
        )
        session.add(row)
        session.commit()
        return row, True

    return _stored_once(sessions, store, lambda row: [row.blob_id], shown)


def _stored_once(
    sessions, store: Callable, blobs: Callable[[object], list[str]], shown: Callable[..., Shown]
) -> tuple[Shown, bool]:
    """store(session) → (row, created), tried once more after a constraint violation (a concurrent upload of the
    same content won); the row shown with its blobs' hashes while its session is open."""
    with sessions() as session:
        for attempt in range(2):
            try:
                with violations_raised(session):
                    row, created = store(session)
                    return shown(row, uploads_repo.blob_hashes(session, blobs(row))), created
            except ConstraintViolation:
                if attempt:
                    raise
    raise AssertionError("unreachable")


def _store_dataset(session, owner: str, name: str | None, checked: CheckedDataset) -> tuple[models.Dataset, bool]:
    x_blob = uploads_repo.save_blob(session, owner, checked.x.sha256, checked.x.size, checked.x.path)
    y_blob = uploads_repo.save_blob(session, owner, checked.y.sha256, checked.y.size, checked.y.path)
    existing = uploads_repo.find_dataset(session, owner, x_blob, y_blob)
    if existing is not None:
        session.commit()
        return existing, False
    row = models.Dataset(
        id=models.new_id("ds"),
        owner=owner,
        name=name,
        x_blob_id=x_blob,
        y_blob_id=y_blob,
        points=checked.points,
        x_shape=list(checked.x.shape),
        x_dtype=checked.x.dtype.name,
        y_shape=list(checked.y.shape),
        y_dtype=checked.y.dtype.name,
        size=checked.x.size + checked.y.size,
        created_at=models.utcnow(),
        x_min=checked.x_range[0] if checked.x_range else None,
        x_max=checked.x_range[1] if checked.x_range else None,
        y_min=checked.y_range[0] if checked.y_range else None,
        y_max=checked.y_range[1] if checked.y_range else None,
    )
    session.add(row)
    session.commit()
    return row, True
