"""The OpenAPI document as a client generator reads it: every response names its media type and its schema.

FastAPI writes a response declared as `{"model": Problem, "content": {"application/problem+json": {}}}`
as two entries: problem+json with no schema, then application/json with Problem's. Generators take
the first media type they know, so every error would parse to nothing. `problem_documents` rewrites
each such response to the one media type the API sends, application/problem+json, carrying the
schema FastAPI put under application/json. A media type declared without a schema (an artifact's
bytes, a plot's PNG or SVG) gets the binary string schema: the body is the file, as sent.

Each model has one schema, the one requests are validated with (`separate_input_output_schemas`
off): a model both sent and answered (JobSpec, SweepSpec) would otherwise be written twice, as
JobSpec-Input and JobSpec-Output, both titled JobSpec, and generators name models by title.
Each operation's id is its handler's name (create_sweep, upload_dataset), so a generated client's
functions are named as the API's handlers are.

    FastAPI(..., generate_unique_id_function=operation_id)
    install_openapi(app)   # app.openapi() builds the document once, rewritten, and caches it
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from ntklab.api_schemas.problems import PROBLEM_MEDIA_TYPE

JSON_MEDIA_TYPE = "application/json"
BINARY = {"type": "string", "format": "binary"}
PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}


def operation_id(route: APIRoute) -> str:
    """The operationId of a route: its handler's name, unique across the API."""
    return route.name


def install_openapi(app: FastAPI) -> None:
    """Make `app.openapi()` answer FastAPI's document with every response rewritten (`problem_documents`)."""
    app.separate_input_output_schemas = False
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = problem_documents(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def problem_documents(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with each response's content rewritten in place by `declared_content`; returns it."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for response in operation.get("responses", {}).values():
                if "content" in response:
                    response["content"] = declared_content(response["content"])
    return document


def declared_content(content: dict[str, Any]) -> dict[str, Any]:
    """One problem+json entry with the Problem schema in place of problem+json + application/json;
    the binary string schema for any other media type that declares none."""
    if PROBLEM_MEDIA_TYPE in content:
        schema = content[PROBLEM_MEDIA_TYPE].get("schema") or content.get(JSON_MEDIA_TYPE, {}).get(
            "schema", PROBLEM_REF
        )
        return {PROBLEM_MEDIA_TYPE: {**content[PROBLEM_MEDIA_TYPE], "schema": schema}}
    return {
        media: entry if "schema" in entry else {**entry, "schema": dict(BINARY)} for media, entry in content.items()
    }
