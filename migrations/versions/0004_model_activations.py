"""Models: activation_elements and forward_flops, what one example costs an uploaded ONNX model.

Counted at upload from the protobuf (shape inference, nothing run), with the batch axis set
to 1: activation_elements = Σ over node outputs of the elements they hold, forward_flops =
2·(multiply-adds of MatMul, Gemm and Conv nodes) + one per element of every other node output.
The memory and work estimate of a job (planner/estimate.py) scales them by the examples
it pushes through the model. Nullable: models uploaded before this revision, and graphs
with a symbolic dimension other than the batch axis, have none; the estimate then falls
back to bounds from the parameter count (docs/operations.md, "Memory and work estimate").

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("models", sa.Column("activation_elements", sa.BigInteger(), nullable=True))
    op.add_column("models", sa.Column("forward_flops", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("models", "forward_flops")
    op.drop_column("models", "activation_elements")
