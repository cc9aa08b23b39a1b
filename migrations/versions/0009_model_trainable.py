"""Models: trainable, the trainable initializers (name, shape) of an uploaded ONNX model.

Counted at upload by ntklab.api_schemas.uploads.trainable_initializers (the rule the SDK and the
worker's converter use), so that a client can check an upload against its module's
named_parameters(). Nullable: models uploaded before this revision answer `trainable: null`
(their `parameters` count is unchanged). Only a nullable column is added (no table rebuild
on SQLite, see 0005).

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("models", sa.Column("trainable", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("models", "trainable")
