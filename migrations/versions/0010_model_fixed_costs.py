"""Models: what an uploaded ONNX model costs whatever the batch — folded constants and per-pass nodes.

Counted at upload from the protobuf (shape inference, nothing run; service/onnx_upload.py), with
the nodes split as the worker's converter splits them (ntklab.api_schemas.uploads.constant_names):
constant_bytes = Σ over the outputs of nodes computed from constants alone (folded once at
conversion, then held for the job) of their bytes, floats at 8; constant_elements = their float
elements (a float32 job holds those at 4 bytes); folding_flops = the FLOPs of folding them;
fixed_elements and fixed_flops = the outputs and FLOPs of the nodes computed from weights and not
from the input, which run once per forward pass. The job estimate (planner/estimate.py)
counts the constants once in memory and the fixed work per forward pass. Nullable: models
uploaded before this revision have none (their estimate is as before). Only nullable columns
are added (no table rebuild on SQLite, see 0005).

Revision ID: 0010
Revises: 0009
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("constant_bytes", "constant_elements", "folding_flops", "fixed_elements", "fixed_flops")


def upgrade() -> None:
    for column in COLUMNS:
        op.add_column("models", sa.Column(column, sa.BigInteger(), nullable=True))


def downgrade() -> None:
    for column in reversed(COLUMNS):
        op.drop_column("models", column)
