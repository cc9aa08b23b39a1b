"""Artifacts as blobs: each artifact names one of its job owner's content-addressed blobs instead of holding its bytes.

Upgrade: every artifact's bytes move into the blob of (job owner, SHA-256) — made if the owner
holds no such blob yet, else shared with the upload or artifact already holding those bytes —
in chunks of BLOB_CHUNK_BYTES copied by the database (INSERT … SELECT substr(data, …)), with
the hash taken over the same chunks read one at a time: no artifact is ever held whole in
memory. Then `artifacts.data` goes, `blob_id` (ON DELETE RESTRICT, indexed) becomes NOT NULL
and `size` a BIGINT.

Downgrade: each artifact gets its bytes back from its blob, and the blobs no data set or model
uses (those only artifacts used) are deleted with their chunks.

Revision ID: 0017
Revises: 0014
"""

import datetime as dt
import hashlib
import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHUNK_BYTES = 1 << 20  # ntklab.store.uploads_repo.BLOB_CHUNK_BYTES when this revision was written
FOREIGN_KEY = "artifacts_blob_id_fkey"

jobs = sa.table("jobs", sa.column("id"), sa.column("owner"))
artifacts = sa.table(
    "artifacts", sa.column("id"), sa.column("job_id"), sa.column("size"), sa.column("data"), sa.column("blob_id")
)
blobs = sa.table(
    "blobs",
    sa.column("id"),
    sa.column("owner"),
    sa.column("sha256"),
    sa.column("size"),
    sa.column("chunks"),
    sa.column("created_at"),
)
blob_chunks = sa.table("blob_chunks", sa.column("blob_id"), sa.column("chunk"), sa.column("data"))
datasets = sa.table("datasets", sa.column("x_blob_id"), sa.column("y_blob_id"))
models = sa.table("models", sa.column("blob_id"))


def upgrade() -> None:
    with op.batch_alter_table("artifacts") as batch:
        batch.add_column(sa.Column("blob_id", sa.String(length=40), nullable=True))
    connection = op.get_bind()
    stored = connection.execute(
        sa.select(artifacts.c.id, artifacts.c.size, jobs.c.owner)
        .join(jobs, jobs.c.id == artifacts.c.job_id)
        .order_by(artifacts.c.id)
    ).all()
    for artifact_id, size, owner in stored:
        blob_id = _blob_of(connection, artifact_id, size, owner)
        connection.execute(sa.update(artifacts).where(artifacts.c.id == artifact_id).values(blob_id=blob_id))
    with op.batch_alter_table("artifacts") as batch:
        batch.drop_column("data")
        batch.alter_column("blob_id", existing_type=sa.String(length=40), nullable=False)
        batch.alter_column("size", existing_type=sa.Integer(), type_=sa.BigInteger(), existing_nullable=False)
        batch.create_foreign_key(FOREIGN_KEY, "blobs", ["blob_id"], ["id"], ondelete="RESTRICT")
        batch.create_index("ix_artifacts_blob_id", ["blob_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("artifacts") as batch:
        batch.add_column(sa.Column("data", sa.LargeBinary(), nullable=True))
    connection = op.get_bind()
    named = connection.execute(sa.select(artifacts.c.id, artifacts.c.blob_id).order_by(artifacts.c.id)).all()
    for artifact_id, blob_id in named:
        data = b"".join(
            connection.execute(
                sa.select(blob_chunks.c.data).where(blob_chunks.c.blob_id == blob_id).order_by(blob_chunks.c.chunk)
            ).scalars()
        )
        connection.execute(sa.update(artifacts).where(artifacts.c.id == artifact_id).values(data=data))
    with op.batch_alter_table("artifacts") as batch:
        batch.drop_index("ix_artifacts_blob_id")
        batch.drop_constraint(FOREIGN_KEY, type_="foreignkey")
        batch.drop_column("blob_id")
        batch.alter_column("data", existing_type=sa.LargeBinary(), nullable=False)
        batch.alter_column("size", existing_type=sa.BigInteger(), type_=sa.Integer(), existing_nullable=False)
    only_artifacts = sorted({blob_id for _, blob_id in named} - _used_by_uploads(connection))
    connection.execute(sa.delete(blob_chunks).where(blob_chunks.c.blob_id.in_(only_artifacts)))
    connection.execute(sa.delete(blobs).where(blobs.c.id.in_(only_artifacts)))


def _blob_of(connection, artifact_id: int, size: int, owner: str) -> str:
    """The owner's blob holding this artifact's bytes, made from them if the owner has none with their SHA-256."""
    starts = range(0, size, CHUNK_BYTES)
    digest = hashlib.sha256()
    for start in starts:
        digest.update(connection.execute(sa.select(_piece(start)).where(artifacts.c.id == artifact_id)).scalar_one())
    sha256 = digest.hexdigest()
    found = connection.execute(sa.select(blobs.c.id).where(blobs.c.owner == owner, blobs.c.sha256 == sha256)).scalar()
    if found is not None:
        return found
    blob_id = f"blob_{uuid.uuid4().hex}"
    connection.execute(
        sa.insert(blobs).values(
            id=blob_id, owner=owner, sha256=sha256, size=size, chunks=len(starts), created_at=dt.datetime.now(dt.UTC)
        )
    )
    for index, start in enumerate(starts):
        connection.execute(
            sa.insert(blob_chunks).from_select(
                ["blob_id", "chunk", "data"],
                sa.select(sa.literal(blob_id), sa.literal(index), _piece(start)).where(artifacts.c.id == artifact_id),
            )
        )
    return blob_id


def _piece(start: int):
    """Bytes [start, start + CHUNK_BYTES) of the artifact's data, cut by the database (substr counts from 1)."""
    return sa.func.substr(artifacts.c.data, start + 1, CHUNK_BYTES, type_=sa.LargeBinary())


def _used_by_uploads(connection) -> set[str]:
    used = connection.execute(
        sa.union(sa.select(datasets.c.x_blob_id), sa.select(datasets.c.y_blob_id), sa.select(models.c.blob_id))
    ).scalars()
    return set(used)
