"""Validation problems name each field once, without a union's bare type mismatches (api_schemas/field_errors.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ntklab.api_schemas.field_errors import field_errors
from ntklab.api_schemas.spec import JobSpec


def local_errors(document: dict) -> list[tuple[str, str]]:
    """(field, message) pairs as `ntklab run --local` reports a spec that fails validation."""
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate(document)
    located = [{**error, "loc": ("body", *error["loc"])} for error in refused.value.errors()]
    return [(error.field, error.message) for error in field_errors(located, document)]


def test_a_bad_activation_name_is_one_error_without_the_list_member_noise():
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate({"model": {"activation": "relux"}})
    assert any(error["type"] == "list_type" for error in refused.value.errors()), "pydantic does report the list member"
    ((field, message),) = local_errors({"model": {"activation": "relux"}})
    assert field == "model.activation" and message.startswith("Input should be 'relu'")


def test_a_field_with_only_type_mismatches_keeps_them():
    errors = local_errors({"model": {"hidden": "wide"}})
    assert errors and {field for field, _ in errors} == {"model.hidden"}
    assert all("valid" in message for _, message in errors)


def test_the_api_names_each_field_once(client):
    answer = client.post("/v1/jobs", json={"model": {"activation": "relux", "hidden": [0]}})
    assert answer.status_code == 422
    fields = [error["field"] for error in answer.json()["errors"]]
    assert sorted(fields) == ["model.activation", "model.hidden.0"]
    assert "valid list" not in answer.text
