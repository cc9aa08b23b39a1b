"""Indexing and rearrangement: Gather, …"""

from __future__ import annotations

import torch.nn.functional as F

from workers.engine.onnx_ops.registry import Node, Run, operator


@operator("Gather", "axis")
def gather(node: Node) -> Run:
    """X indexed along `axis` by integer indices (negative from the end); a float table on axis 0 is an embedding lookup."""
    axis = node.attr("axis", 0)

    def run(data, indices):
        indices = indices.long()
        indices = indices.where(indices >= 0, indices + data.shape[axis])
        if axis == 0 and data.dim() == 2 and data.is_floating_point():
            return F.embedding(indices, data)
        picked = data.index_select(axis, indices.reshape(-1))
        return picked.reshape((*data.shape[:axis], *indices.shape, *data.shape[axis % data.dim() + 1:]))

    return run
