"""torch's intra-op thread count set for a block and restored after: `with torch_threads(1): ...`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch.set_num_threads(count) inside the block, the previous count after it (also on an exception)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
