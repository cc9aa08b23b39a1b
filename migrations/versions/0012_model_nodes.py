"""An ONNX model's node count, for the time estimate's per-node term.

models.nodes: the nodes of the uploaded graph (service/onnx_upload.check_onnx), each one framework
operation or a few on every forward pass (planner/forward_profile.py: D = 2 per node). Nullable:
models stored before this revision have none and are estimated at the default node cap (10 000). Only
a nullable column is added (no table rebuild on SQLite, see 0005).

Revision ID: 0012
Revises: 0011
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("models", sa.Column("nodes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("models", "nodes")
