"""What every spec module shares: the strict base model, the stored-text rule, the hidden activations' names,
width and depth limits.

spec.py (the job) and graph.py (the layers of a graph model) both build on these; they live
here so that neither of the two has to import the other's module to define its models.

Stored text: every free-form string the service stores (job and sweep names and tags, fit
names, upload names, and every string inside a sweep's base spec and grid, object keys
included) follows one rule, `storable`: no NUL (U+0000, which PostgreSQL text cannot hold)
and no lone surrogate (U+D800–U+DFFF, which is not Unicode and cannot be encoded as UTF-8).
Lengths are bounded where each string is declared.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import pydantic_core
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue

MAX_WIDTH = 10_000_000
MAX_LAYERS = 64

Activation = Literal["relu", "tanh", "gelu", "softplus", "swish", "sigmoid", "erf", "quadratic", "identity"]


class Strict(BaseModel):
    """Unknown fields, NaN and ±Infinity are refused; defaults are validated like given values."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_default=True)


NUL = "\x00"
LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def text_problem(text: str) -> str | None:
    """Why `text` cannot be stored (a NUL or a lone surrogate in it), or None when it can."""
    if NUL in text:
        return "NUL characters (U+0000) are not allowed"
    if LONE_SURROGATE.search(text):
        return "lone surrogates (U+D800–U+DFFF) are not allowed: send valid Unicode"
    return None


def storable(text: str) -> str:
    """`text` unchanged; ValueError with `text_problem`'s reason when it cannot be stored."""
    if (problem := text_problem(text)) is not None:
        raise ValueError(problem)
    return text


def storable_json(value: JsonValue) -> JsonValue:
    """`value` unchanged when every string in it, object keys included, is storable; else ValueError naming
    the dotted path inside `value` (`model.hidden.0`) of an offending string. Iterative: any depth.
    A value whose JSON has no escaped NUL and encodes (no lone surrogate) is storable without the walk,
    which a million inline numbers would otherwise cost (~0.07 s instead of ~0.6 s)."""
    if _encodes_without_nul(value):
        return value
    pending: list[tuple[str, JsonValue]] = [("", value)]
    while pending:
        path, item = pending.pop()
        if isinstance(item, str) and (problem := text_problem(item)) is not None:
            raise ValueError(f"{path}: {problem}" if path else problem)
        if isinstance(item, dict):
            for key, inner in item.items():
                if (problem := text_problem(key)) is not None:
                    raise ValueError(f"key {key!r}{' in ' + path if path else ''}: {problem}")
                pending.append((f"{path}.{key}" if path else key, inner))
        elif isinstance(item, list):
            pending.extend((f"{path}.{index}" if path else str(index), inner) for index, inner in enumerate(item))
    return value


def _encodes_without_nul(value: JsonValue) -> bool:
    try:
        return b"\\u0000" not in pydantic_core.to_json(value)
    except pydantic_core.PydanticSerializationError:
        return False


StoredText = Annotated[str, AfterValidator(storable)]
"""A string the service stores: `storable`, of any length (keys of a stored JSON object)."""


def stored_text(max_length: int, min_length: int | None = None) -> Any:
    """StoredText of bounded length; the bounds are checked first, so their errors read as for any string."""
    return Annotated[str, Field(min_length=min_length, max_length=max_length), AfterValidator(storable)]


MAX_NAME_LENGTH = 200
MAX_TAG_LENGTH = 64
Name = stored_text(MAX_NAME_LENGTH)
Tag = stored_text(MAX_TAG_LENGTH, min_length=1)

StoredJson = Annotated[JsonValue, AfterValidator(storable_json)]
"""A JSON value the service stores: every string in it, keys included, is `storable`."""
