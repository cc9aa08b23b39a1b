"""Blocks of point pairs for the infinite-width maps, computed once per unordered pair and spread over threads.

A layer map's state M [n, n, P, P] is symmetric under swapping the pair: M[j, i] = M[i, j]ᵀ (K and Θ
are second moments Σ_c h_c(x_i)[p] h_c(x_j)[q]; the convolution's window and the activation's
expectation treat both points alike). So a map needs the pairs j ≥ i only and mirrors the rest:
half the work of every blocked map.

A block is a rectangle rows × cols of the n × n pairs whose [m, P, P] view of a contiguous M is
contiguous (so results are written in place): either one row i and a run of columns j ≥ i (mirrored
after), or, where BLOCK_ENTRIES holds whole rows, a run of full rows (not mirrored: few, large ops
beat half the entries in many small ones when a pair is a handful of numbers, e.g. P = 1).

The blocks run on torch.get_num_threads() Python threads, each op on one intra-op thread: a block's
ops are small (≈ 64 K entries) and split across torch's pool each waits for every thread (10× slower
on a loaded machine, bench); block by block on threads, the cores stay busy. torch releases the GIL
inside its ops and the blocks write disjoint entries.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
from torch import Tensor

from ntklab.engine.torch_threads import torch_threads

BLOCK_ENTRIES = 1 << 16
"""Entries of one [P, P] block's worth of pairs a map works on at once: small enough that its temporaries
stay in a core's cache (512 KiB each in float64), large enough that each torch call does real work."""


@dataclass(frozen=True)
class PairBlock:
    """The pairs (i, j) for i in rows, j in cols, flattened row by row; mirrored: M[j, i] = M[i, j]ᵀ is filled after."""

    rows: slice
    cols: slice
    mirrored: bool

    def view(self, M: Tensor) -> Tensor:
        """M[rows, cols] [n, n, P, P] as [m, P, P], a view of a contiguous M."""
        return M[self.rows, self.cols].view(-1, *M.shape[2:])

    def mirror(self, M: Tensor) -> None:
        """M[j, i] = M[i, j]ᵀ for this block's pairs with j > i (its single row i)."""
        if self.mirrored:
            i, start = self.rows.start, max(self.cols.start, self.rows.start + 1)
            M[start : self.cols.stop, i] = M[i, start : self.cols.stop].transpose(-1, -2)


def pair_blocks(n: int, entries_per_pair: int) -> list[PairBlock]:
    """Blocks of about BLOCK_ENTRIES entries (≥ 1 pair) covering every pair j ≥ i once (module docstring)."""
    size = max(1, BLOCK_ENTRIES // entries_per_pair)
    if size >= n:
        rows = size // n
        return [PairBlock(slice(i, min(i + rows, n)), slice(0, n), False) for i in range(0, n, rows)]
    return [PairBlock(slice(i, i + 1), slice(j, min(j + size, n)), True) for i in range(n) for j in range(i, n, size)]


def run_blocks(work: Callable[[PairBlock], None], blocks: list[PairBlock], outputs: tuple[Tensor, ...]) -> None:
    """work(block), which fills block.view(M) of each output M, then the block's mirror in each, for every block;
    on torch.get_num_threads() threads of one intra-op thread each."""

    def task(block: PairBlock) -> None:
        work(block)
        for M in outputs:
            block.mirror(M)

    threads = torch.get_num_threads()
    with torch_threads(1), ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in pool.map(task, blocks):  # re-raises a block's exception
            pass
