"""Sweeps can be listed: sweeps.seq (their creation order, for cursor paging) and sweep_tags.

GET /v1/sweeps pages sweeps newest first by `seq`, as GET /v1/jobs pages jobs, and filters them
by tag through `sweep_tags` (one row per tag of the sweep itself, as job_tags is for jobs).
Sweeps stored before are numbered in the order they were created and their tags copied from
their stored spec. A new sweep's seq comes from the database: on PostgreSQL a sequence (the
column's default), on SQLite a trigger that numbers the row inserted, under the database's
write lock. Only a column, indexes, a trigger and a table are added (no rebuild of sweeps on
SQLite, see 0005).

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

sweeps = sa.table(
    "sweeps",
    sa.column("id", sa.String),
    sa.column("spec", sa.JSON),
    sa.column("seq", sa.Integer),
    sa.column("created_at", sa.DateTime),
)
sweep_tags = sa.table("sweep_tags", sa.column("sweep_id", sa.String), sa.column("tag", sa.String))

SEQUENCE = "sweeps_seq_seq"
TRIGGER = "sweeps_number_new_row"


def upgrade() -> None:
    op.add_column("sweeps", sa.Column("seq", sa.Integer(), nullable=True))
    op.create_table(
        "sweep_tags",
        sa.Column("sweep_id", sa.String(length=40), nullable=False),
        sa.Column("tag", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("sweep_id", "tag"),
    )
    op.create_index(op.f("ix_sweep_tags_tag"), "sweep_tags", ["tag"], unique=False)
    _number_and_tag_stored_sweeps()
    op.create_index("ix_sweeps_seq", "sweeps", ["seq"], unique=True)
    op.create_index("ix_sweeps_owner_seq", "sweeps", ["owner", "seq"], unique=False)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"CREATE SEQUENCE {SEQUENCE} OWNED BY sweeps.seq")
        op.execute(f"SELECT setval('{SEQUENCE}', COALESCE((SELECT MAX(seq) FROM sweeps), 0) + 1, false)")
        op.execute(f"ALTER TABLE sweeps ALTER COLUMN seq SET DEFAULT nextval('{SEQUENCE}')")
    else:
        op.execute(
            f"CREATE TRIGGER {TRIGGER} AFTER INSERT ON sweeps FOR EACH ROW WHEN NEW.seq IS NULL BEGIN "
            "UPDATE sweeps SET seq = (SELECT COALESCE(MAX(seq), 0) + 1 FROM sweeps) WHERE rowid = NEW.rowid; END"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE sweeps ALTER COLUMN seq DROP DEFAULT")
        op.execute(f"DROP SEQUENCE {SEQUENCE}")
    else:
        op.execute(f"DROP TRIGGER {TRIGGER}")
    op.drop_index("ix_sweeps_owner_seq", table_name="sweeps")
    op.drop_index("ix_sweeps_seq", table_name="sweeps")
    op.drop_index(op.f("ix_sweep_tags_tag"), table_name="sweep_tags")
    op.drop_table("sweep_tags")
    op.drop_column("sweeps", "seq")


def _number_and_tag_stored_sweeps() -> None:
    """seq 1, 2, … in creation order, and each stored sweep's own tags (its spec's top-level `tags`)."""
    connection = op.get_bind()
    stored = connection.execute(sa.select(sweeps.c.id, sweeps.c.spec).order_by(sweeps.c.created_at, sweeps.c.id)).all()
    for seq, (sweep_id, spec) in enumerate(stored, start=1):
        connection.execute(sa.update(sweeps).where(sweeps.c.id == sweep_id).values(seq=seq))
        tags = list(dict.fromkeys((spec or {}).get("tags") or ()))
        if tags:
            connection.execute(sa.insert(sweep_tags), [{"sweep_id": sweep_id, "tag": tag} for tag in tags])
