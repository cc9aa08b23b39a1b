"""Spec loading: a JobSpec, a dict, a JSON file and a YAML file give the same request body."""

from __future__ import annotations

import json

import pytest
import yaml

from ntklab.api_schemas.spec import JobSpec, model_spec
from ntklab.specs import load_document, to_body

SPEC = {
    "name": "fig1",
    "seed": 3,
    "model": {"hidden": [64], "output_activation": "swish"},
    "training": {"max_steps": 10},
}


def test_json_yaml_dict_and_pydantic_agree(tmp_path):
    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    (tmp_path / "spec.yml").write_text(yaml.safe_dump(SPEC))
    bodies = [
        to_body(SPEC),
        to_body(tmp_path / "spec.json"),
        to_body(str(tmp_path / "spec.yaml")),
        to_body(tmp_path / "spec.yml"),
    ]
    assert all(body == SPEC for body in bodies)
    from_model = to_body(JobSpec.model_validate(SPEC))
    assert JobSpec.model_validate(from_model) == JobSpec.model_validate(SPEC)
    assert from_model["model"]["output_activation"] == "swish" and from_model["seed"] == 3


def test_overrides_replace_top_level_keys_and_dump_models():
    body = to_body(SPEC, seed=7, model=model_spec(hidden=[5]))
    assert body["seed"] == 7
    assert body["model"]["hidden"] == [5]
    assert SPEC["seed"] == 3


def test_keywords_alone_make_a_spec():
    assert to_body(name="only-kwargs", tags=["a"]) == {"name": "only-kwargs", "tags": ["a"]}


def test_the_callers_dict_is_not_mutated():
    body = to_body(SPEC)
    body["model"]["hidden"].append(1)
    assert SPEC["model"]["hidden"] == [64]


def test_unknown_suffix_and_non_mapping_are_refused(tmp_path):
    (tmp_path / "spec.txt").write_text("{}")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match=r"\.json, \.yaml or \.yml"):
        load_document(tmp_path / "spec.txt")
    with pytest.raises(ValueError, match="one mapping"):
        load_document(tmp_path / "list.yaml")
    with pytest.raises(TypeError):
        to_body(42)
