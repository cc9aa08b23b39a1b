"""The OpenAPI document a generator reads: errors as problem+json with the Problem schema, typed results,
one schema per model, operation ids named after the handlers. Built in process, no server needed
(tests/service/test_generated_client.py runs a real generator on it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ntklab.config.settings import Settings
from ntklab.service.app import create_app

PROBLEM = {"$ref": "#/components/schemas/Problem"}


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root: Path = tmp_path_factory.mktemp("openapi")
    return create_app(Settings(database_url=f"sqlite:///{root / 'unused.db'}")).openapi()


def responses(document: dict):
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                yield f"{method.upper()} {path} {status}", int(status), response


def test_every_error_is_problem_json_with_the_problem_schema(document):
    errors = [(where, response) for where, status, response in responses(document) if status >= 400]
    assert len(errors) > 50
    for where, response in errors:
        assert response["content"] == {"application/problem+json": {"schema": PROBLEM}}, where


def test_every_declared_media_type_has_a_schema(document):
    for where, _, response in responses(document):
        for media, entry in response.get("content", {}).items():
            assert "schema" in entry, (where, media)


def test_results_are_typed_by_their_models(document):
    schemas = document["components"]["schemas"]
    assert schemas["Job"]["properties"]["spec"]["anyOf"][0] == {"$ref": "#/components/schemas/JobSpec"}
    assert schemas["Job"]["properties"]["summary"]["anyOf"][0] == {"$ref": "#/components/schemas/JobSummary"}
    assert schemas["Sweep"]["properties"]["spec"] == {"$ref": "#/components/schemas/SweepSpec"}
    assert schemas["JobSummary"]["additionalProperties"] is True
    assert not [name for name in schemas if name.endswith(("-Input", "-Output"))]


def test_operation_ids_are_the_handlers_names(document):
    ids = [operation["operationId"] for operations in document["paths"].values() for operation in operations.values()]
    assert len(ids) == len(set(ids))
    assert {"create_job", "create_sweep", "cancel_sweep", "run_preset", "upload_dataset"} <= set(ids)
