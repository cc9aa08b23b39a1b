"""Expanding a sweep's grid into job specs.

A grid {path: [v₁, v₂, …], …} over dotted paths is the cartesian product of its axes;
a linked axis "a,b" moves several paths together ([[a₁, b₁], [a₂, b₂], …]).
The base is validated once (`sweep_base`): its canonical document has every default filled
in and inferred fields left to be inferred again. Each point is that document with its
values set and is validated as a JobSpec on its own, so an error names the grid point and
the field.

Cost: points are made one at a time (`grid_points`), and a point copies only the objects
and lists on its grid paths. When no grid path enters `data`, every point takes the base's
already validated data section as it is, so inline data of a million values is validated
(and dumped, see `point_document`) once per sweep, not once per point.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ntklab.api_schemas.field_errors import field_errors, named
from ntklab.api_schemas.spec import InlineData, JobSpec

INFERRED_FIELDS = (("model", "output_dim"),)
INLINE_ARRAYS = ("x", "y")


class GridError(ValueError):
    """A grid that cannot be applied: `field` is the dotted path at fault, `reason` what is wrong with it;
    the error's text is `where: reason` (which base or grid point)."""

    def __init__(self, field: str, message: str, reason: str | None = None):
        super().__init__(message)
        self.field = field
        self.reason = reason or message


@dataclass(frozen=True)
class GridPoint:
    values: dict[str, Any]
    spec: JobSpec


@dataclass(frozen=True)
class SweepBase:
    """The base spec validated once: its canonical JSON document and its validated data section."""

    document: dict[str, Any]
    data: Any


def grid_size(grid: dict[str, list[Any]]) -> int:
    size = 1
    for values in grid.values():
        size *= len(values)
    return size


def sweep_base(base: dict[str, Any]) -> SweepBase:
    """The base with every default filled in and inferred fields reset to None; GridError naming the field if invalid.

    Inline arrays are lists of floats once validated, JSON as they are: the document holds
    those lists rather than a dumped copy of them."""
    try:
        spec = JobSpec.model_validate(base)
    except ValidationError as error:
        raise _named(error, "base", base) from None
    arrays = INLINE_ARRAYS if isinstance(spec.data, InlineData) else ()
    document = spec.model_dump(mode="json", exclude={"data": set(arrays)})
    document["data"].update({name: getattr(spec.data, name) for name in arrays})
    for section, field in INFERRED_FIELDS:
        if field not in base.get(section, {}):
            document[section][field] = None
    return SweepBase(document, spec.data)


def set_path(spec: dict[str, Any], path: str, value: Any) -> None:
    """spec[a][b][0] = value for path "a.b.0"; list items are addressed by index."""
    *parents, last = path.split(".")
    node: Any = spec
    for key in parents:
        node = _child(node, key, path)
    _assign(node, last, value, path)


def with_values(spec: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """`spec` with each path set to its value, as a new document that copies only the objects and
    lists on those paths and shares everything else with `spec`."""
    copied = dict(spec)
    for path, value in values.items():
        node: Any = copied
        for key in path.split(".")[:-1]:
            child = copy.copy(_child(node, key, path))
            _assign(node, key, child, path)
            node = child
        set_path(copied, path, value)
    return copied


def _child(node: Any, key: str, path: str) -> Any:
    if isinstance(node, list):
        return node[_index(node, key, path)]
    if isinstance(node, dict) and key in node and node[key] is not None:
        return node[key]
    raise GridError(path, f"grid path {path!r}: {key!r} is not in the base spec")


def _assign(node: Any, key: str, value: Any, path: str) -> None:
    if isinstance(node, list):
        node[_index(node, key, path)] = value
    elif isinstance(node, dict):
        node[key] = value
    else:
        raise GridError(path, f"grid path {path!r} does not lead into an object or a list")


def _index(node: list, key: str, path: str) -> int:
    if not key.isdigit() or int(key) >= len(node):
        raise GridError(path, f"grid path {path!r}: index {key} is outside a list of {len(node)}")
    return int(key)


def grid_points(base: SweepBase, grid: dict[str, list[Any]]) -> Iterator[GridPoint]:
    """Every point of the grid as a validated JobSpec, one at a time, in row-major order of the grid's axes."""
    axes = list(grid)
    shares_data = all(path.split(".")[0] != "data" for axis in axes for path in axis.split(","))
    for combo in itertools.product(*(grid[axis] for axis in axes)):
        values = _assignments(axes, combo)
        document = with_values(base.document, values)
        if shares_data:
            document["data"] = base.data
        try:
            spec = JobSpec.model_validate(document)
        except ValidationError as error:
            raise _named(error, f"grid point {values}", document) from None
        yield GridPoint(values, spec)


def expand_grid(base: dict[str, Any], grid: dict[str, list[Any]]) -> list[GridPoint]:
    """All of `grid_points` for a base given as a document."""
    return list(grid_points(sweep_base(base), grid))


def point_document(spec: JobSpec, base: SweepBase) -> dict[str, Any]:
    """The JSON document of a point's spec; a data section it shares with the base is the base
    document's own (not dumped again), which `ntklab.store.sweep_specs.patch_between` then skips."""
    if spec.data is not base.data:
        return spec.model_dump(mode="json")
    dumped = spec.model_dump(mode="json", exclude={"data"})
    return {key: base.document["data"] if key == "data" else dumped[key] for key in base.document}


def _assignments(axes: list[str], combo: tuple) -> dict[str, Any]:
    """{path: value} for one grid point; a linked axis "a,b" assigns its list's entries in turn."""
    values: dict[str, Any] = {}
    for axis, value in zip(axes, combo):
        paths = axis.split(",")
        if len(paths) == 1:
            values[axis] = value
        elif isinstance(value, list) and len(value) == len(paths):
            values.update(zip(paths, value))
        else:
            raise GridError(
                axis, f"grid axis {axis!r} links {len(paths)} paths: {value!r} is not a list of {len(paths)}"
            )
    return values


def _named(error: ValidationError, where: str, document: dict[str, Any]) -> GridError:
    """The first field error, named as the API names it (api_schemas/field_errors.py), its message led by `where`."""
    first = field_errors([{**entry, "loc": ("body", *entry["loc"])} for entry in error.errors()], document)[0]
    return GridError(first.field, f"{where}: {named(first.field, first.message)}", first.message)
