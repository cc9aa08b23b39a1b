"""Sweeps store their base spec once; each sweep job stores only where it differs (jobs.spec_patch).

jobs.spec_patch is added: a job a sweep makes from this revision on stores its patch there and
JSON null in jobs.spec; store/sweep_specs.py materialises its spec from the sweep's base. Sweeps
get idempotency_key and request_hash, unique per (owner, idempotency_key), so a retried POST
/v1/sweeps or /v1/presets/{name} finds the sweep it made. Jobs stored before keep their full
spec and are read as they are. Downgrading writes every sweep job's full spec back first.

Only columns and an index are added: on SQLite, rebuilding jobs or sweeps (batch mode) would
drop the table, and with foreign keys on, its ON DELETE CASCADE children with it (a job's
tags, metrics and artifacts; a sweep's jobs) — which is why jobs.spec stays NOT NULL.

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ntklab.store.sweep_specs import apply_patch

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

jobs = sa.table(
    "jobs",
    sa.column("id", sa.String),
    sa.column("sweep_id", sa.String),
    sa.column("spec", sa.JSON),
    sa.column("spec_patch", sa.JSON(none_as_null=True)),
)
sweeps = sa.table("sweeps", sa.column("id", sa.String), sa.column("spec", sa.JSON))


def upgrade() -> None:
    op.add_column("sweeps", sa.Column("idempotency_key", sa.String(length=200), nullable=True))
    op.add_column("sweeps", sa.Column("request_hash", sa.String(length=64), nullable=True))
    op.create_index("ix_sweeps_owner_idempotency_key", "sweeps", ["owner", "idempotency_key"], unique=True)
    op.add_column("jobs", sa.Column("spec_patch", sa.JSON(), nullable=True))


def downgrade() -> None:
    _write_back_sweep_job_specs()
    op.drop_column("jobs", "spec_patch")
    op.drop_index("ix_sweeps_owner_idempotency_key", table_name="sweeps")
    op.drop_column("sweeps", "request_hash")
    op.drop_column("sweeps", "idempotency_key")


def _write_back_sweep_job_specs() -> None:
    """Each sweep job's full spec = its sweep's base + its patch, for the code of revision 0004."""
    connection = op.get_bind()
    bases: dict[str, dict] = {}
    rows = connection.execute(
        sa.select(jobs.c.id, jobs.c.sweep_id, jobs.c.spec_patch).where(jobs.c.spec_patch.is_not(None))
    ).all()
    for job_id, sweep_id, patch in rows:
        if sweep_id not in bases:
            bases[sweep_id] = connection.execute(sa.select(sweeps.c.spec).where(sweeps.c.id == sweep_id)).scalar_one()[
                "base"
            ]
        spec = apply_patch(bases[sweep_id], patch)
        connection.execute(sa.update(jobs).where(jobs.c.id == job_id).values(spec=spec))
