"""`client.models`: upload a network as ONNX, list, retrieve and delete uploaded models.

    model = client.models.upload(module, example_input)   # a torch.nn.Module, exported here
    model = client.models.upload("net.onnx")              # an ONNX file
    job = client.jobs.create(model={"kind": "onnx", "id": model.id}, data=...)

A module is exported on this machine (ntklab/onnx_export.py: the `[torch]` extra,
pip install 'ntklab[torch]') with a dynamic batch axis and no folding, and checked to have the
module's trainable parameters and outputs before it is sent (ExportMismatchError otherwise);
the service only ever parses the ONNX protobuf and converts it to torch in the worker. Pickled checkpoints (.pt, .pth, .pt2,
.pkl) are refused, here and by the service: loading one can run arbitrary code.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import ConfigDict

from ntklab._resource import AsyncAPIResource, SyncAPIResource
from ntklab.api_schemas import uploads as wire
from ntklab.onnx_export import export_module
from ntklab.pagination import AsyncPaginator, Page

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".pt2", ".pkl", ".pickle", ".ckpt")
REFUSED_CHECKPOINT = (
    "ntklab takes ONNX models only: a pickled checkpoint ({name}) can run arbitrary code when loaded, so the "
    "service never loads one. Load the module yourself and pass it: client.models.upload(module, example_input)"
)


class Model(wire.Model):
    """An uploaded ONNX model as the service reports it (ntklab.api_schemas.uploads.Model)."""

    model_config = ConfigDict(extra="allow")


ModelRef = str | Model


def model_id(model: ModelRef) -> str:
    return model.id if isinstance(model, Model) else model


def model_body(model: Any, example_input: Any, *, dynamo: bool, opset_version: int | None) -> bytes:
    """ONNX bytes from a path, from bytes, or by exporting a torch.nn.Module on `example_input`."""
    if isinstance(model, (str, os.PathLike)):
        name = os.fspath(model)
        if name.lower().endswith(CHECKPOINT_SUFFIXES):
            raise ValueError(REFUSED_CHECKPOINT.format(name=name))
        with open(model, "rb") as file:
            return file.read()
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if hasattr(model, "state_dict") and callable(model):
        if example_input is None:
            raise TypeError("exporting a module needs example_input: a batch [batch, ...] of inputs")
        return export_module(model, example_input, dynamo=dynamo, opset_version=opset_version)
    raise TypeError(f"upload() takes a torch.nn.Module, an .onnx path or ONNX bytes, not {type(model).__name__}")


def _params(name: str | None) -> dict[str, Any]:
    return {"name": name}


class Models(SyncAPIResource):
    def upload(
        self,
        model: Any,
        example_input: Any = None,
        /,
        *,
        name: str | None = None,
        dynamo: bool = False,
        opset_version: int | None = None,
    ) -> Model:
        """Upload a torch.nn.Module (exported here on `example_input`), an .onnx path, or ONNX bytes."""
        body = model_body(model, example_input, dynamo=dynamo, opset_version=opset_version)
        return self._upload("/v1/models", body, cast_to=Model, params=_params(name))

    def retrieve(self, model: ModelRef) -> Model:
        return self._get(f"/v1/models/{model_id(model)}", cast_to=Model)

    def list(self, *, limit: int | None = None) -> Page[Model]:
        """The first page of this key's models, newest first; iterating it yields every one."""
        return self._get_page("/v1/models", item=Model.model_validate, params={"limit": limit})

    def delete(self, model: ModelRef) -> None:
        """Delete the model (a ConflictError while queued or running jobs use it)."""
        self._delete(f"/v1/models/{model_id(model)}")


class AsyncModels(AsyncAPIResource):
    """`Models` for an AsyncClient: the same methods, awaited."""

    async def upload(
        self,
        model: Any,
        example_input: Any = None,
        /,
        *,
        name: str | None = None,
        dynamo: bool = False,
        opset_version: int | None = None,
    ) -> Model:
        body = model_body(model, example_input, dynamo=dynamo, opset_version=opset_version)
        return await self._upload("/v1/models", body, cast_to=Model, params=_params(name))

    async def retrieve(self, model: ModelRef) -> Model:
        return await self._get(f"/v1/models/{model_id(model)}", cast_to=Model)

    def list(self, *, limit: int | None = None) -> AsyncPaginator[Model]:
        return self._list("/v1/models", item=Model.model_validate, params={"limit": limit})

    async def delete(self, model: ModelRef) -> None:
        await self._delete(f"/v1/models/{model_id(model)}")
