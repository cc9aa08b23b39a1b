"""Indexing and rearrangement: Gather, GatherElements, Slice, ScatterND, Trilu, Pad, Resize.

Index-like inputs (starts, pads, sizes, k) are read with shapes.int_values: constants when known
at conversion, else the values of a run-time shape tensor (never a batched data tensor). Data
moves through index_select / gather / scatter out of place, so every operator is differentiable
in its data inputs and runs per point under torch.func.vmap.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ntklab.engine.nets.onnx_ops.registry import Node, Run, operator
from ntklab.engine.nets.onnx_ops.shapes import float_values, int_values


def _positive(indices: Tensor, size: int) -> Tensor:
    """Integer indices with the negative ones counted from the end."""
    indices = indices.long()
    return indices.where(indices >= 0, indices + size)


@operator("Gather", "axis")
def gather(node: Node) -> Run:
    """X indexed along `axis` by integer indices (negative from the end); a float table on axis 0 is an embedding lookup."""
    axis = node.attr("axis", 0)

    def run(data, indices):
        indices = _positive(indices, data.shape[axis])
        if axis == 0 and data.dim() == 2 and data.is_floating_point():
            return F.embedding(indices, data)
        picked = data.index_select(axis, indices.reshape(-1))
        return picked.reshape((*data.shape[:axis], *indices.shape, *data.shape[axis % data.dim() + 1 :]))

    return run


@operator("GatherElements", "axis")
def gather_elements(node: Node) -> Run:
    """out[i][j][k] = X[index[i][j][k]][j][k] along `axis` (torch.gather; negative indices from the end)."""
    axis = node.attr("axis", 0)
    return lambda data, indices: torch.gather(data, axis, _positive(indices, data.shape[axis]))


@operator("GatherND", "batch_dims")
def gather_nd(node: Node) -> Run:
    """Slices of X picked by index tuples: out[b…, m…] = X[b…, indices[b…, m…, :]] (the last indices axis k ≤ rank − batch_dims)."""
    batch_dims = node.attr("batch_dims", 0)

    def run(data: Tensor, indices: Tensor) -> Tensor:
        indices = indices.long()
        k, batch = indices.shape[-1], math.prod(data.shape[:batch_dims])
        flat = data.reshape(batch, *data.shape[batch_dims:])
        tuples = indices.reshape(batch, -1, k)
        sizes = torch.tensor(flat.shape[1 : 1 + k], device=indices.device)
        tuples = torch.where(tuples < 0, tuples + sizes, tuples)
        rows = torch.arange(batch, device=indices.device)[:, None].expand(batch, tuples.shape[1])
        picked = flat[(rows, *tuples.unbind(-1))]
        return picked.reshape(*indices.shape[:-1], *flat.shape[1 + k :])

    return run


@operator("Slice")
def slice_(node: Node) -> Run:
    """X[starts:ends:steps] along `axes` (bounds clamped to each dimension as the spec says; negative steps walk back)."""
    starts_of, ends_of, axes_of, steps_of = (int_values(node, i) for i in (1, 2, 3, 4))
    if 0 in (steps_of(None) if node.has_input(4) and node.constant(node.inputs[4]) is not None else []):
        raise node.refuse("a step of 0 is not allowed")

    def run(x, starts, ends, axes=None, steps=None):
        begin, end = starts_of(starts), ends_of(ends)
        axes, steps = axes_of(axes), steps_of(steps)
        axes = list(range(len(begin))) if axes is None else [a % x.dim() for a in axes]
        steps = [1] * len(begin) if steps is None else steps
        index: list[slice] = [slice(None)] * x.dim()
        backwards = []
        for axis, b, e, step in zip(axes, begin, end, steps):
            size = x.shape[axis]
            b, e = b + size if b < 0 else b, e + size if e < 0 else e
            if step > 0:
                index[axis] = slice(min(max(b, 0), size), min(max(e, 0), size), step)
            elif step < 0:
                backwards.append((axis, range(min(max(b, 0), size - 1), min(max(e, -1), size - 1), step)))
            else:
                raise ValueError("Slice: a step of 0 is not allowed")
        x = x[tuple(index)]
        for axis, picked in backwards:
            x = x.index_select(axis, torch.tensor(list(picked), dtype=torch.long, device=x.device))
        return x

    return run


REDUCTIONS = {"add": "sum", "mul": None, "max": "amax", "min": "amin"}  # mul: products in rounds (scatter_reduce's
# prod backward reads values with .item(), which vmap over its derivatives refuses)


@operator("ScatterND", "reduction")
def scatter_nd(node: Node) -> Run:
    """X with the slices X[indices[…]] replaced by updates, or added, multiplied, maxed or minned in by `reduction`."""
    reduction = node.attr("reduction", "none")
    if reduction != "none" and reduction not in REDUCTIONS:
        raise node.refuse(f"reduction={reduction} is not supported")

    def run(data, indices, updates):
        depth = indices.shape[-1]
        leading, trailing = data.shape[:depth], data.shape[depth:]
        strides = torch.tensor(
            [math.prod(leading[i + 1 :]) for i in range(depth)], dtype=torch.long, device=data.device
        )
        sizes = torch.tensor(leading, dtype=torch.long, device=data.device)
        linear = (_positive_nd(indices.long(), sizes) * strides).sum(-1).reshape(-1, 1)
        width = math.prod(trailing)
        flat = data.reshape(math.prod(leading), width)
        values = updates.reshape(-1, width)
        where = linear.expand(-1, width)
        if reduction == "none":
            out = flat.scatter(0, where, values)
        elif reduction == "mul":
            out = flat
            for rank in _occurrences(linear.reshape(-1).tolist()):  # a slot's k-th update in round k
                chosen = torch.as_tensor(rank, device=data.device)
                at = where.index_select(0, chosen)
                out = out.scatter(0, at, out.gather(0, at) * values.index_select(0, chosen))
        else:
            out = flat.scatter_reduce(0, where, values, REDUCTIONS[reduction], include_self=True)
        return out.reshape(data.shape)

    return run


def _positive_nd(indices: Tensor, sizes: Tensor) -> Tensor:
    return indices.where(indices >= 0, indices + sizes)


def _occurrences(slots: list[int]) -> list[list[int]]:
    """The positions of `slots` in rounds: round k holds each slot's k-th occurrence, so no slot repeats in a round."""
    rounds: list[list[int]] = []
    seen: dict[int, int] = {}
    for position, slot in enumerate(slots):
        k = seen.get(slot, 0)
        seen[slot] = k + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(position)
    return rounds


@operator("Trilu", "upper")
def trilu(node: Node) -> Run:
    """The upper (upper = 1) or lower triangle of the last two axes from diagonal k (optional input, default 0); the rest 0."""
    upper = node.attr("upper", 1)
    k_of = int_values(node, 1)

    def run(x, k=None):
        diagonal = (k_of(k) or [0])[0]
        return torch.triu(x, diagonal) if upper else torch.tril(x, diagonal)

    return run


PAD_MODES = ("constant", "reflect", "edge", "wrap")


@operator("Pad", "mode")
def pad(node: Node) -> Run:
    """X padded by `pads` ([begins…, ends…] over `axes`): constant, reflect, edge or (opset ≥ 19) wrap; negative pads crop first."""
    mode = node.attr("mode", "constant")
    if mode not in PAD_MODES:
        raise node.refuse(f"mode={mode} is not supported")
    if mode == "wrap" and node.opset < 19:
        raise node.refuse("mode=wrap is not supported before opset 19 (it is not in the spec there)")
    pads_of, axes_of = int_values(node, 1), int_values(node, 3)
    known = node.constant(node.inputs[2]) if node.has_input(2) else np.zeros(())
    fill = None if known is None else (np.asarray(known).reshape(-1)[:1].tolist() or [0])[0]  # None: a run-time value

    def run(x, pads, constant_value=None, axes=None):
        widths, axes = pads_of(pads), axes_of(axes)
        axes = list(range(x.dim())) if axes is None else [a % x.dim() for a in axes]
        count = len(axes)
        for axis, before, after in zip(axes, widths[:count], widths[count:]):
            if before < 0 or after < 0:
                x = x.narrow(axis, max(-before, 0), x.shape[axis] + min(before, 0) + min(after, 0))
        grow = [
            (axis, max(before, 0), max(after, 0)) for axis, before, after in zip(axes, widths[:count], widths[count:])
        ]
        grow = [(axis, before, after) for axis, before, after in grow if before or after]
        if not grow:
            return x
        if mode == "constant":
            flat = [0] * (2 * x.dim())
            for axis, before, after in grow:
                flat[2 * (x.dim() - 1 - axis)], flat[2 * (x.dim() - 1 - axis) + 1] = before, after
            if fill is not None:
                return F.pad(x, flat, value=fill)
            value = constant_value.reshape(()).to(x.dtype)
            return F.pad(x, flat) + F.pad(torch.zeros_like(x), flat, value=1) * value
        for axis, before, after in grow:
            picked = _pad_indices(mode, x.shape[axis], before, after)
            x = x.index_select(axis, torch.as_tensor(picked, device=x.device))
        return x

    return run


@lru_cache(maxsize=256)
def _pad_indices(mode: str, size: int, before: int, after: int) -> np.ndarray:
    """The source index of each position of an axis of `size` padded by (before, after) in `mode`."""
    position = np.arange(-before, size + after)
    if mode == "edge":
        return np.clip(position, 0, size - 1)
    if mode == "wrap":
        return np.mod(position, size)
    if size == 1:
        return np.zeros_like(position)
    period = 2 * (size - 1)
    folded = np.mod(position, period)
    return np.where(folded < size, folded, period - folded)


RESIZE_COORDINATES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@operator(
    "Resize",
    "mode",
    "coordinate_transformation_mode",
    "nearest_mode",
    "cubic_coeff_a",
    "exclude_outside",
    "extrapolation_value",
    "antialias",
    "axes",
    "keep_aspect_ratio_policy",
)
def resize(node: Node) -> Run:
    """X resized by `scales` or to `sizes` (over `axes`), nearest or (multi)linear; not cubic, antialias, exclude_outside, tf_crop_and_resize."""
    mode = node.attr("mode", "nearest")
    coordinates = node.attr("coordinate_transformation_mode", "half_pixel")
    nearest = node.attr("nearest_mode", "round_prefer_floor")
    if node.opset < 11:
        raise node.refuse("Resize before opset 11 is not supported")
    if mode not in ("nearest", "linear"):
        raise node.refuse(f"mode={mode} is not supported (nearest and linear are)")
    if coordinates not in RESIZE_COORDINATES or (coordinates == "half_pixel_symmetric" and node.opset < 19):
        raise node.refuse(f"coordinate_transformation_mode={coordinates} is not supported")
    if nearest not in NEAREST_MODES:
        raise node.refuse(f"nearest_mode={nearest} is not supported")
    for name, default in (("exclude_outside", 0), ("antialias", 0)):
        if node.attr(name, default) != default:
            raise node.refuse(f"{name}={node.attr(name)} is not supported")
    policy = node.attr("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        raise node.refuse(f"keep_aspect_ratio_policy={policy} is not supported (stretch is)")
    if not node.has_input(2) and not node.has_input(3):
        raise node.refuse("scales or sizes is required")
    axes = node.attr("axes")
    scales_of, sizes_of = float_values(node, 2), int_values(node, 3)

    def run(x, _roi=None, scales=None, sizes=None):
        resized = list(range(x.dim())) if axes is None else [a % x.dim() for a in axes]
        targets = sizes_of(sizes)
        if targets:
            plan = [(axis, target / x.shape[axis], target) for axis, target in zip(resized, targets)]
        else:
            plan = [(axis, scale, int(scale * x.shape[axis])) for axis, scale in zip(resized, scales_of(scales))]
        for axis, scale, target in plan:
            size = x.shape[axis]
            if target == size and math.isclose(scale, 1.0):
                continue
            source = _source_coordinates(coordinates, size, target, scale)
            if mode == "nearest":
                picked = _nearest(nearest, source, size)
                x = x.index_select(axis, torch.as_tensor(picked, device=x.device))
                continue
            low, high, weight = _linear(source, size)
            shape = [target if i == axis else 1 for i in range(x.dim())]
            weight = torch.as_tensor(weight, dtype=x.dtype, device=x.device).reshape(shape)
            below = x.index_select(axis, torch.as_tensor(low, device=x.device))
            above = x.index_select(axis, torch.as_tensor(high, device=x.device))
            x = below * (1 - weight) + above * weight
        return x

    return run


@lru_cache(maxsize=256)
def _source_coordinates(mode: str, size: int, target: int, scale: float) -> np.ndarray:
    """x_original of each output position along one axis (float64), per coordinate_transformation_mode."""
    y = np.arange(target, dtype=np.float64)
    if mode == "asymmetric":
        return y / scale
    if mode == "align_corners":
        return np.zeros(target) if target == 1 else y * (size - 1) / (target - 1)
    if mode == "pytorch_half_pixel":
        return np.zeros(target) if target == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = target / (scale * size)
        return size / 2 * (1 - adjustment) + (y + 0.5) / scale - 0.5
    return (y + 0.5) / scale - 0.5


def _nearest(mode: str, source: np.ndarray, size: int) -> np.ndarray:
    floor = np.floor(source)
    fraction = source - floor
    if mode == "round_prefer_floor":
        up = fraction > 0.5
    elif mode == "round_prefer_ceil":
        up = fraction >= 0.5
    elif mode == "ceil":
        up = fraction > 0
    else:
        up = np.zeros_like(fraction, dtype=bool)
    return np.clip(floor + up, 0, size - 1).astype(np.int64)


def _linear(source: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    floor = np.floor(source)
    low = np.clip(floor, 0, size - 1).astype(np.int64)
    high = np.clip(floor + 1, 0, size - 1).astype(np.int64)
    return low, high, source - floor
