"""Alembic is the only way the schema is made: `upgrade head` builds exactly ntklab.store.models, on both backends."""

from __future__ import annotations

import json

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import JSON, column, inspect, select, table, text, update

from ntklab.store.db import make_engine
from ntklab.store.models import Base

BACKENDS = ("sqlite", "postgresql")
MODEL_TABLES = {
    "api_keys",
    "sweeps",
    "sweep_tags",
    "jobs",
    "job_tags",
    "metric_chunks",
    "artifacts",
    "blobs",
    "blob_chunks",
    "datasets",
    "models",
}


def schema_differences(url: str) -> list:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()


def table_names(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


@pytest.mark.parametrize("fresh_database", BACKENDS, indirect=True)
def test_upgrade_head_builds_exactly_the_models(fresh_database, alembic_for):
    _, url = fresh_database
    assert schema_differences(url), "an empty database must differ from the models (the comparison can fail)"
    command.upgrade(alembic_for(url), "head")
    assert table_names(url) == MODEL_TABLES | {"alembic_version"}
    assert schema_differences(url) == []


@pytest.mark.parametrize("fresh_database", BACKENDS, indirect=True)
def test_downgrade_base_removes_every_table(fresh_database, alembic_for):
    _, url = fresh_database
    command.upgrade(alembic_for(url), "head")
    command.downgrade(alembic_for(url), "base")
    assert table_names(url) == {"alembic_version"}


def insert_kept_job(connection, status: str, *, attempts: int, step: int) -> None:
    """Job 'job_kept' of alice (parameters 7, spec {"seed": 3}) in `status`, written with the columns of 0001."""
    connection.execute(
        text(
            "INSERT INTO jobs (id, owner, spec, spec_hash, parameters, status, cancel_requested, attempts, "
            "progress_step, progress_total, progress_phase, created_at) VALUES "
            "('job_kept', 'alice', '{\"seed\": 3}', 'h', 7, :status, false, :attempts, :step, 5, :status, '2026-01-01')"
        ),
        {"status": status, "attempts": attempts, "step": step},
    )


@pytest.mark.parametrize("fresh_database", BACKENDS, indirect=True)
def test_each_upgrade_keeps_the_rows_already_stored(fresh_database, alembic_for):
    """A database made by the first revision, with a job in it, upgraded to head and back."""
    _, url = fresh_database
    command.upgrade(alembic_for(url), "0001")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            insert_kept_job(connection, "succeeded", attempts=1, step=5)
        command.upgrade(alembic_for(url), "head")
        assert schema_differences(url) == []
        command.downgrade(alembic_for(url), "0001")
        command.upgrade(alembic_for(url), "head")
        with engine.connect() as connection:
            kept = connection.execute(
                text("SELECT owner, status, parameters, spec FROM jobs WHERE id = 'job_kept'")
            ).one()
    finally:
        engine.dispose()
    assert (kept.owner, kept.status, kept.parameters) == ("alice", "succeeded", 7)
    assert "seed" in str(kept.spec)


@pytest.mark.parametrize("fresh_database", BACKENDS, indirect=True)
def test_0003_adds_the_upload_tables_and_keeps_jobs_and_uploads(fresh_database, alembic_for):
    """0002 → 0003 keeps the jobs; uploads stored at 0003 survive a round trip of the head revision's neighbours."""
    _, url = fresh_database
    command.upgrade(alembic_for(url), "0002")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            insert_kept_job(connection, "queued", attempts=0, step=0)
        command.upgrade(alembic_for(url), "0003")
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO blobs (id, owner, sha256, size, chunks, created_at) VALUES ('blob_1', 'alice', :sha, 3, 1, '2026-01-01')"
                ),
                {"sha": "a" * 64},
            )
            connection.execute(
                text("INSERT INTO blob_chunks (blob_id, chunk, data) VALUES ('blob_1', 0, :data)"), {"data": b"abc"}
            )
            connection.execute(
                text(
                    "INSERT INTO datasets (id, owner, name, x_blob_id, y_blob_id, points, x_shape, x_dtype, y_shape, y_dtype, size, created_at) "
                    "VALUES ('ds_1', 'alice', 'd', 'blob_1', 'blob_1', 1, '[1, 1]', 'float64', '[1]', 'float64', 3, '2026-01-01')"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO models (id, owner, name, blob_id, format, parameters, inputs, outputs, operators, opset, size, created_at) "
                    "VALUES ('mdl_1', 'alice', 'm', 'blob_1', 'onnx', 2, '[]', '[]', '[\"Gemm\"]', 17, 3, '2026-01-01')"
                )
            )
        with engine.connect() as connection:
            assert connection.execute(text("SELECT data FROM blob_chunks WHERE blob_id = 'blob_1'")).scalar() == b"abc"
            assert connection.execute(text("SELECT points FROM datasets WHERE id = 'ds_1'")).scalar() == 1
        command.downgrade(alembic_for(url), "0002")
        assert table_names(url) == {
            "api_keys",
            "sweeps",
            "jobs",
            "job_tags",
            "metric_chunks",
            "artifacts",
            "alembic_version",
        }
        command.upgrade(alembic_for(url), "head")
        assert schema_differences(url) == []
        with engine.connect() as connection:
            kept = connection.execute(text("SELECT owner, status, parameters FROM jobs WHERE id = 'job_kept'")).one()
    finally:
        engine.dispose()
    assert (kept.owner, kept.status, kept.parameters) == ("alice", "queued", 7)


@pytest.mark.parametrize("fresh_database", BACKENDS, indirect=True)
def test_0013_adds_label_ranges_and_keeps_the_data_sets(fresh_database, alembic_for):
    """A data set stored at 0012 has no label range at 0013 (NULL: its jobs must give model.output_dim), and back."""
    _, url = fresh_database
    command.upgrade(alembic_for(url), "0012")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO blobs (id, owner, sha256, size, chunks, created_at) VALUES ('blob_1', 'alice', :sha, 3, 1, '2026-01-01')"
                ),
                {"sha": "a" * 64},
            )
            connection.execute(
                text(
                    "INSERT INTO datasets (id, owner, name, x_blob_id, y_blob_id, points, x_shape, x_dtype, y_shape, y_dtype, size, created_at) "
                    "VALUES ('ds_1', 'alice', 'd', 'blob_1', 'blob_1', 1, '[1, 1]', 'float64', '[1]', 'int64', 3, '2026-01-01')"
                )
            )
        command.upgrade(alembic_for(url), "0013")
        with engine.begin() as connection:
            assert connection.execute(text("SELECT y_min, y_max FROM datasets WHERE id = 'ds_1'")).one() == (None, None)
            connection.execute(text("UPDATE datasets SET y_min = -3, y_max = 9000000000 WHERE id = 'ds_1'"))
            assert connection.execute(text("SELECT y_min, y_max FROM datasets WHERE id = 'ds_1'")).one() == (
                -3,
                9_000_000_000,
            )
        command.downgrade(alembic_for(url), "0012")
        with engine.connect() as connection:
            assert "y_min" not in {column["name"] for column in inspect(connection).get_columns("datasets")}
            assert connection.execute(text("SELECT points FROM datasets WHERE id = 'ds_1'")).scalar() == 1
    finally:
        engine.dispose()


@pytest.mark.parametrize("fresh_database", BACKENDS, indirect=True)
def test_0015_adds_the_stored_estimate_and_keeps_the_jobs(fresh_database, alembic_for):
    """A job stored at 0014 has no estimate at 0015 (NULL: its readers estimate it from its spec); a stored
    document reads back as it was written; downgrading drops the column and keeps the job."""
    _, url = fresh_database
    command.upgrade(alembic_for(url), "0014")
    engine = make_engine(url)
    document = {
        "memory_bytes": 123,
        "flops": 4.5,
        "memory": [["data", 123, "n·d"]],
        "work": [],
        "ops": [],
        "rates": {"flops_per_s": 1e9, "seconds_per_op": 2e-5},
    }
    try:
        with engine.begin() as connection:
            insert_kept_job(connection, "queued", attempts=0, step=0)
        command.upgrade(alembic_for(url), "0015")
        jobs = table(
            "jobs", column("id"), column("estimate", JSON)
        )  # the columns of 0015, whatever the models hold later
        with engine.begin() as connection:
            assert connection.execute(select(jobs.c.estimate).where(jobs.c.id == "job_kept")).scalar() is None
            connection.execute(update(jobs).where(jobs.c.id == "job_kept").values(estimate=document))
        with engine.connect() as connection:
            assert connection.execute(select(jobs.c.estimate).where(jobs.c.id == "job_kept")).scalar() == document
        command.downgrade(alembic_for(url), "0014")
        with engine.connect() as connection:
            assert "estimate" not in {column["name"] for column in inspect(connection).get_columns("jobs")}
            assert connection.execute(text("SELECT parameters FROM jobs WHERE id = 'job_kept'")).scalar() == 7
    finally:
        engine.dispose()


@pytest.mark.parametrize("fresh_database", BACKENDS, indirect=True)
def test_0016_moves_the_warnings_out_of_the_summary_and_back(fresh_database, alembic_for):
    """A job finished at 0014 kept its warnings in its summary; 0016 moves them to jobs.warnings, and back."""
    _, url = fresh_database
    warning = {"code": "target_loss_not_reached", "message": "m", "values": {"steps": 3}}
    summaries = {
        "job_warned": {"final_loss": 0.5, "warnings": [warning]},
        "job_clean": {"final_loss": 0.1, "warnings": []},
        "job_queued": None,
    }
    command.upgrade(alembic_for(url), "0014")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            for job_id, summary in summaries.items():
                connection.execute(
                    text(
                        "INSERT INTO jobs (id, owner, spec, spec_hash, parameters, status, cancel_requested, attempts, "
                        "progress_step, progress_total, progress_phase, created_at, summary) VALUES (:id, 'alice', '{}', 'h', 7, "
                        "'succeeded', false, 1, 0, 0, 'succeeded', '2026-01-01', :summary)"
                    ),
                    {"id": job_id, "summary": None if summary is None else json.dumps(summary)},
                )
        command.upgrade(alembic_for(url), "0016")
        assert read_jobs(engine, "summary, warnings") == {
            "job_warned": ({"final_loss": 0.5}, [warning]),
            "job_clean": ({"final_loss": 0.1}, []),
            "job_queued": (None, None),
        }
        command.downgrade(alembic_for(url), "0014")
        assert read_jobs(engine, "summary") == {job_id: (summary,) for job_id, summary in summaries.items()}
    finally:
        engine.dispose()


def read_jobs(engine, columns: str) -> dict[str, tuple]:
    """{job id: (its `columns`, JSON decoded)}."""
    with engine.connect() as connection:
        rows = connection.execute(text(f"SELECT id, {columns} FROM jobs")).all()
    return {row[0]: tuple(decoded(value) for value in row[1:]) for row in rows}


def decoded(value):
    """A JSON column's value as read by plain SQL: PostgreSQL's driver decodes it, SQLite hands back the text."""
    return json.loads(value) if isinstance(value, str) else value
