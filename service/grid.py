"""Expanding a sweep's grid into job specs.

A grid {path: [v₁, v₂, …], …} over dotted paths is the cartesian product of its axes;
a linked axis "a,b" moves several paths together ([[a₁, b₁], [a₂, b₂], …]).
Each point is applied to the canonical base spec (every default written out, inferred
fields left to be inferred again) and validated as a JobSpec on its own, so an error
names the grid point and the field.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from api_schemas.spec import JobSpec

INFERRED_FIELDS = (("model", "output_dim"),)


class GridError(ValueError):
    """A grid that cannot be applied: `field` is the dotted path at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class GridPoint:
    values: dict[str, Any]
    spec: JobSpec


def grid_size(grid: dict[str, list[Any]]) -> int:
    size = 1
    for values in grid.values():
        size *= len(values)
    return size


def canonical_base(base: dict[str, Any]) -> dict[str, Any]:
    """The base spec with every default filled in and inferred fields reset to None."""
    full = JobSpec.model_validate(base).model_dump(mode="json")
    for section, field in INFERRED_FIELDS:
        if field not in base.get(section, {}):
            full[section][field] = None
    return full


def set_path(spec: dict[str, Any], path: str, value: Any) -> None:
    """spec[a][b][0] = value for path "a.b.0"; list items are addressed by index."""
    *parents, last = path.split(".")
    node: Any = spec
    for key in parents:
        node = _child(node, key, path)
    if isinstance(node, list):
        index = _index(node, last, path)
        node[index] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise GridError(path, f"grid path {path!r} does not lead into an object or a list")


def _child(node: Any, key: str, path: str) -> Any:
    if isinstance(node, list):
        return node[_index(node, key, path)]
    if isinstance(node, dict) and key in node and node[key] is not None:
        return node[key]
    raise GridError(path, f"grid path {path!r}: {key!r} is not in the base spec")


def _index(node: list, key: str, path: str) -> int:
    if not key.isdigit() or int(key) >= len(node):
        raise GridError(path, f"grid path {path!r}: index {key} is outside a list of {len(node)}")
    return int(key)


def expand_grid(base: dict[str, Any], grid: dict[str, list[Any]]) -> list[GridPoint]:
    """Every point of the grid as a validated JobSpec, in row-major order of the grid's axes."""
    try:
        canonical = canonical_base(base)
    except ValidationError as error:
        raise _named(error, "base") from None
    axes = list(grid)
    points = []
    for combo in itertools.product(*(grid[axis] for axis in axes)):
        values = _assignments(axes, combo)
        spec = copy.deepcopy(canonical)
        for path, value in values.items():
            set_path(spec, path, value)
        try:
            points.append(GridPoint(values, JobSpec.model_validate(spec)))
        except ValidationError as error:
            raise _named(error, f"grid point {values}") from None
    return points


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
            raise GridError(axis, f"grid axis {axis!r} links {len(paths)} paths: {value!r} is not a list of {len(paths)}")
    return values


def _named(error: ValidationError, where: str) -> GridError:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"])
    return GridError(field, f"{where}: {field}: {first['msg']}")
