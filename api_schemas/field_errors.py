"""pydantic's validation errors as FieldErrors: one entry per field and message, named by its dotted path.

Shared by the API's 422 problems (service/problems.py) and `ntklab run --local`, which
validates a spec in-process, so both name a field alike: `model.hidden.0`, `data.x.3.1` —
pydantic's location without the request part ("body", "query", …) and without the
union-member tags pydantic inserts (`gaussian_mixture`, `list[float]`, …), which are
recognised by walking the document along the location.

A value a union refuses is reported once per union member. Where one member says what is
wrong with it ("Input should be 'relu', 'tanh', …") and another only that its type does not
fit ("Input should be a valid list"), the type mismatch is noise and is left out; a field
whose every message is a type mismatch keeps them all.

A union chosen by a field (api_schemas/tagged_union.py) that gets no valid choice is reported on
that field, `data.kind` or `model.layers.0.type`, with the choices: "Input should be 'a', 'b'
or 'c'", or "Field required: one of …" where the document leaves it out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ntklab.api_schemas.problems import FieldError
from ntklab.api_schemas.tagged_union import TAG_ERROR

REQUEST_PARTS = ("body", "query", "path", "header", "cookie")
LIMIT_KEYS = ("le", "lt", "ge", "gt", "max_length", "min_length", "multiple_of")
MAX_REPORTED_ERRORS = 50
MAX_ECHOED_STRING = 200


def field_errors(errors: Sequence[dict[str, Any]], body: Any) -> list[FieldError]:
    """pydantic errors (`ValidationError.errors()`, locations starting with a request part such as
    "body") → FieldErrors with dotted paths, without union type-mismatch noise, deduplicated, at
    most MAX_REPORTED_ERRORS."""
    located = [(dotted_field(error["loc"], body, error["type"]), error) for error in errors]
    explained = {field for field, error in located if not _type_mismatch(error)}
    seen: dict[tuple[str, str], FieldError] = {}
    for field, error in located:
        if field in explained and _type_mismatch(error):
            continue
        found = (
            _tag_error(field, error)
            if error["type"] == TAG_ERROR
            else FieldError(
                field=field,
                message=str(error["msg"]).removeprefix("Value error, "),
                limit=_limit(error.get("ctx") or {}),
                value=None if error["type"] == "missing" else echoable(error.get("input")),
            )
        )
        if (found.field, found.message) in seen:
            continue
        seen[(found.field, found.message)] = found
        if len(seen) == MAX_REPORTED_ERRORS:
            break
    return list(seen.values())


def named(field: str | None, message: str) -> str:
    """ "field: message", or the message alone where it already begins with the field (`data.probe.n = 10 exceeds …`
    on field `data`): a line names its field once."""
    if not field or (message.startswith(field) and not _continues_name(message[len(field) : len(field) + 1])):
        return message
    return f"{field}: {message}"


def _continues_name(char: str) -> bool:
    return char.isalnum() or char == "_"


def _tag_error(field: str, error: dict[str, Any]) -> FieldError:
    """A tagged union's refusal, on its tag field (`data.kind`): the choices, and the value sent if any."""
    key, choices, document = error["ctx"]["discriminator"], error["ctx"]["choices"], error.get("input")
    if not isinstance(document, dict):
        return FieldError(field=field, message=f"Input should be an object with {key} {choices}")
    if key not in document:
        return FieldError(field=f"{field}.{key}", message=f"Field required: one of {choices}")
    return FieldError(field=f"{field}.{key}", message=f"Input should be {choices}", value=echoable(document[key]))


def dotted_field(loc: Sequence[int | str], body: Any, error_type: str) -> str:
    """("body", "data", "gaussian_mixture", "n_train") → "data.n_train"; ("query", "limit") → "limit"."""
    parts = list(loc)
    part_of_request = parts.pop(0) if parts and parts[0] in REQUEST_PARTS else None
    if not parts:
        return part_of_request or ""
    node, known = body, part_of_request == "body"
    kept: list[int | str] = []
    for index, part in enumerate(parts):
        if known and _has(node, part):
            kept.append(part)
            node = node[part]
            continue
        is_last = index == len(parts) - 1
        if known and isinstance(part, str) and _is_union_tag(part, node, is_last, error_type):
            continue
        kept.append(part)
        known = False
    return ".".join(str(part) for part in kept)


def echoable(value: Any) -> int | float | str | bool | None:
    """A scalar safe to echo back: finite numbers, booleans and short strings; None otherwise."""
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str) and len(value) <= MAX_ECHOED_STRING:
        return value
    return None


def _type_mismatch(error: dict[str, Any]) -> bool:
    """pydantic's "Input should be a valid <type>" errors: list_type, int_type, dict_type, model_type, …"""
    return str(error["type"]).endswith("_type")


def _has(node: Any, part: int | str) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def _is_union_tag(part: str, node: Any, is_last: bool, error_type: str) -> bool:
    if isinstance(node, dict) and node.get("kind") == part:
        return True
    return not (is_last and error_type == "missing")


def _limit(ctx: dict[str, Any]) -> int | float | str | None:
    for key in LIMIT_KEYS:
        if key in ctx:
            return echoable(ctx[key])
    return None
