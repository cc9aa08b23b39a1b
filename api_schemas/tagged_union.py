"""A union of specs chosen by one field (`kind`, `type`), with an optional default and an error that lists the choices.

pydantic's own discriminated union refuses a document that leaves the field out ("Unable to
extract tag using discriminator 'kind'") and names neither the choices nor a default. Here the
member is picked by a function: the field's value, or `default` where the document leaves it
out; anything else is one error of type TAG_ERROR whose context carries the field's name and
the choices, which api_schemas/field_errors.py reports on the field itself (`data.kind`).
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Discriminator, Tag

TAG_ERROR = "union_tag"


def tagged_union(members: dict[str, type], key: str, default: str | None = None) -> Any:
    """Annotated[Union[...], Discriminator] over {tag: model}: a document's `key` names its model."""
    choices = choice_list(list(members))
    message = f"{key} should be {choices}" + (f" (left out: {default!r})" if default is not None else "")

    def tag_of(value: Any) -> str | None:
        if isinstance(value, dict):
            tag = value.get(key, default)
        else:
            tag = getattr(value, key, None)
        return tag if isinstance(tag, str) and tag in members else None

    tagged = tuple(Annotated[model, Tag(tag)] for tag, model in members.items())
    discriminator = Discriminator(
        tag_of,
        custom_error_type=TAG_ERROR,
        custom_error_message=message,
        custom_error_context={"discriminator": key, "choices": choices},
    )
    # Union over a tuple built at run time: no `X | Y` spelling, and ruff's UP007 fix would drop the Union
    return Annotated[Union[tagged], discriminator]  # type: ignore[valid-type]  # noqa: UP007


def choice_list(tags: list[str]) -> str:
    """'a', 'b' or 'c' — the choices as pydantic words a Literal's ("Input should be 'a', 'b' or 'c'")."""
    quoted = [repr(tag) for tag in tags]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
