"""A convolution's map of second moments: window sums over the same offset at a pair of positions.

For a k×k convolution with stride s and zero padding pad, on an H×W grid (P = H·W positions), a
block of pairs' matrices M [m, P, P] maps to

    M'[p, q] = (1/k²) Σ_δ M[s·p + δ − pad, s·q + δ − pad]        δ over the k×k offsets, M = 0 outside the image

(Arora et al. 2019's CNTK; neural-tangents convolves the pair of spatial axes with a diagonal filter).
The window separates into the k row offsets, summed over the pair of row axes (h, h'), then the k
column offsets over the pair of column axes (w, w'): 2k shifted sums, not k².

Where the grid is kept (stride 1, 2·pad = k − 1: "same" padding) each shifted sum is one contiguous
slice of the flattened block: with f = (h·W + w)·P + h'·W + w', the row offset e moves f by e·(W·P + W)
and the column offset e by e·(P + 1), and a 0/1 mask over f zeroes the terms whose source leaves the
image — so every sum is one long multiply-add. Other strides and paddings sum strided 5-D slices.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor


@dataclass(frozen=True)
class DiagonalWindow:
    """The map M [m, P, P] -> M' [m, P', P'] of one convolution (module docstring) on `grid` (H, W)."""

    grid: tuple[int, int]
    k: int
    stride: int
    padding: int

    @property
    def out(self) -> tuple[int, int]:
        """The output grid (H', W')."""
        return tuple((size + 2 * self.padding - self.k) // self.stride + 1 for size in self.grid)

    def mean(self, M: Tensor) -> Tensor:
        """M' = (1/k²) Σ_δ M[s·p + δ − pad, s·q + δ − pad] for a block M [m, P, P] (float64)."""
        if self.stride == 1 and 2 * self.padding == self.k - 1:
            return self._same_grid_sum(M).mul_(1.0 / self.k**2)
        return self._strided_sum(M).mul_(1.0 / self.k**2)

    def _same_grid_sum(self, M: Tensor) -> Tensor:
        """The window sum as 2(k − 1) masked multiply-adds of shifted slices of the flat block [m, P²]."""
        m, positions = M.shape[0], M.shape[-1]
        width = self.grid[1]
        rows = _masked_shift_sum(M.reshape(m, positions * positions), self._masks[0], step=width * positions + width)
        return _masked_shift_sum(rows, self._masks[1], step=positions + 1).reshape(m, positions, positions)

    @cached_property
    def _masks(self) -> tuple[dict[int, Tensor], dict[int, Tensor]]:
        """The row and the column offsets' masks (_offset_masks), float64."""
        return _offset_masks(self.grid, self.padding, axis=0), _offset_masks(self.grid, self.padding, axis=1)

    def _strided_sum(self, M: Tensor) -> Tensor:
        """The window sum by strided slices: rows on axes (1, 3) of [m, H, W, H, W], then columns on (2, 4)."""
        m = M.shape[0]
        (height, width), (oh, ow) = self.grid, self.out
        rows = self._diagonal_sum(M.reshape(m, height, width, height, width), axes=(1, 3), size_out=oh)
        return self._diagonal_sum(rows, axes=(2, 4), size_out=ow).reshape(m, oh * ow, oh * ow)

    def _diagonal_sum(self, M: Tensor, *, axes: tuple[int, int], size_out: int) -> Tensor:
        """Σ_{δ<k} M[…, s·o + δ − pad, …, s·o' + δ − pad, …] on the pair of `axes`, zero where an index leaves [0, S)."""
        size = M.shape[axes[0]]
        shape = list(M.shape)
        shape[axes[0]] = shape[axes[1]] = size_out
        total = M.new_zeros(shape)
        for delta in range(self.k):
            first = max(0, -((delta - self.padding) // self.stride))  # the first output whose input s·o + δ − pad ≥ 0
            stop = min(size_out, (size - 1 + self.padding - delta) // self.stride + 1)  # past the last whose input < S
            if first < stop:
                start = self.stride * first + delta - self.padding
                target, source = [slice(None)] * M.dim(), [slice(None)] * M.dim()
                for axis in axes:
                    target[axis] = slice(first, stop)
                    source[axis] = slice(start, start + self.stride * (stop - first - 1) + 1, self.stride)
                total[tuple(target)] += M[tuple(source)]
        return total


def _offset_masks(grid: tuple[int, int], padding: int, *, axis: int) -> dict[int, Tensor]:
    """For each offset e ≠ 0 in [−pad, pad] along `axis` (0 rows, 1 columns): the mask [P²] over f that is 1
    where both positions' coordinates moved by e stay inside the grid."""
    height, width = grid
    coordinate = torch.arange(height * width).reshape(height, width)
    coordinate = (coordinate // width if axis == 0 else coordinate % width).reshape(-1)
    size = grid[axis]
    masks = {}
    for e in range(-padding, padding + 1):
        if e:
            inside = ((coordinate + e >= 0) & (coordinate + e < size)).to(torch.float64)
            masks[e] = (inside[:, None] * inside[None, :]).reshape(-1)
    return masks


def _masked_shift_sum(flat: Tensor, masks: dict[int, Tensor], *, step: int) -> Tensor:
    """flat[:, f] + Σ_e mask_e[f]·flat[:, f + e·step] over the masks' offsets e, [m, F] (terms outside [0, F) are masked)."""
    total = flat.clone()
    size = flat.shape[-1]
    for e, mask in masks.items():
        shift = e * step
        lo, hi = max(0, -shift), size - max(0, shift)
        total[:, lo:hi].addcmul_(flat[:, lo + shift : hi + shift], mask[lo:hi].to(flat.device, flat.dtype))
    return total
