"""Turn what a user has (a pydantic spec, a dict, a JSON or YAML file) into a request body.

Dicts and files are sent as written: the service is the one judge of a spec and answers
a bad one with a 422 that names the field. Pydantic objects are dumped in JSON mode.
Keyword arguments replace top-level keys, so `create("base.yaml", seed=3)` works.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

SpecLike = BaseModel | Mapping[str, Any] | str | os.PathLike[str]


def load_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a .json, .yaml or .yml file into a dict."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    if suffix == ".json":
        document = json.loads(text)
    elif suffix in (".yaml", ".yml"):
        document = yaml.safe_load(text)
    else:
        raise ValueError(f"{path}: a spec file must end in .json, .yaml or .yml")
    if not isinstance(document, dict):
        raise ValueError(f"{path}: a spec file must hold one mapping, not {type(document).__name__}")
    return document


def to_body(spec: SpecLike | None = None, **overrides: Any) -> dict[str, Any]:
    """The JSON body for a spec given in any supported form, with top-level overrides applied."""
    if spec is None:
        body: dict[str, Any] = {}
    elif isinstance(spec, BaseModel):
        body = spec.model_dump(mode="json")
    elif isinstance(spec, Mapping):
        body = json.loads(json.dumps(dict(spec)))
    elif isinstance(spec, (str, os.PathLike)):
        body = load_document(spec)
    else:
        raise TypeError(f"a spec is a pydantic model, a mapping or a path, not {type(spec).__name__}")
    for key, value in overrides.items():
        body[key] = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    return body
