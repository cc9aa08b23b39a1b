"""Uploads: content-addressed blobs stored in chunks, and the data sets and ONNX models made of them.

A blob is stored once per owner and SHA-256 (uq_blobs_owner_sha256) as rows of blob_chunks,
so a worker on any host reads it through the database. datasets and models reference their
blobs with ON DELETE RESTRICT: a blob goes only after the last row that uses it.

Revision ID: 0003
Revises: 0002
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("owner", sa.String(length=40), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner", "sha256", name="uq_blobs_owner_sha256"),
    )
    op.create_table(
        "blob_chunks",
        sa.Column("blob_id", sa.String(length=40), nullable=False),
        sa.Column("chunk", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["blob_id"], ["blobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("blob_id", "chunk"),
    )
    op.create_table(
        "datasets",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("owner", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("x_blob_id", sa.String(length=40), nullable=False),
        sa.Column("y_blob_id", sa.String(length=40), nullable=False),
        sa.Column("points", sa.BigInteger(), nullable=False),
        sa.Column("x_shape", sa.JSON(), nullable=False),
        sa.Column("x_dtype", sa.String(length=16), nullable=False),
        sa.Column("y_shape", sa.JSON(), nullable=False),
        sa.Column("y_dtype", sa.String(length=16), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["x_blob_id"], ["blobs.id"], ondelete="RESTRICT"),
        sa.ForeignKeyConstraint(["y_blob_id"], ["blobs.id"], ondelete="RESTRICT"),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id"),
        sa.UniqueConstraint("owner", "x_blob_id", "y_blob_id", name="uq_datasets_owner_blobs"),
    )
    op.create_index("ix_datasets_owner_seq", "datasets", ["owner", "seq"], unique=False)
    op.create_index(op.f("ix_datasets_x_blob_id"), "datasets", ["x_blob_id"], unique=False)
    op.create_index(op.f("ix_datasets_y_blob_id"), "datasets", ["y_blob_id"], unique=False)
    op.create_table(
        "models",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("owner", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("blob_id", sa.String(length=40), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("parameters", sa.BigInteger(), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("outputs", sa.JSON(), nullable=False),
        sa.Column("operators", sa.JSON(), nullable=False),
        sa.Column("opset", sa.Integer(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["blob_id"], ["blobs.id"], ondelete="RESTRICT"),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id"),
        sa.UniqueConstraint("owner", "blob_id", name="uq_models_owner_blob"),
    )
    op.create_index("ix_models_owner_seq", "models", ["owner", "seq"], unique=False)
    op.create_index(op.f("ix_models_blob_id"), "models", ["blob_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_models_blob_id"), table_name="models")
    op.drop_index("ix_models_owner_seq", table_name="models")
    op.drop_table("models")
    op.drop_index(op.f("ix_datasets_y_blob_id"), table_name="datasets")
    op.drop_index(op.f("ix_datasets_x_blob_id"), table_name="datasets")
    op.drop_index("ix_datasets_owner_seq", table_name="datasets")
    op.drop_table("datasets")
    op.drop_table("blob_chunks")
    op.drop_table("blobs")
