"""Fixtures of the fault tests: their own Redis and PostgreSQL (see servers.py) and a stack on them."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from ntklab import localstack
from ntklab.localstack import QUICK_RECOVERY_SETTINGS, LocalStack, StackError, free_port

from .servers import PostgresCluster, RedisServer


@pytest.fixture(scope="session")
def fault_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed; scripts/services.sh installs it", pytrace=False)
    server = RedisServer(free_port(), tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    if server.pidfile.exists():
        server.kill()


@pytest.fixture(scope="session")
def fault_postgres() -> Iterator[PostgresCluster]:
    if os.geteuid() != 0:
        pytest.fail(
            "the fault tests create and stop a PostgreSQL cluster of their own: run them as root", pytrace=False
        )
    if not Path("/usr/lib/postgresql").is_dir():
        pytest.fail("PostgreSQL is not installed; scripts/services.sh installs it", pytrace=False)
    cluster = PostgresCluster()
    cluster.start()
    cluster.ensure_role()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def fault_database(fault_postgres: PostgresCluster) -> Iterator[str]:
    """A fresh, migrated database on the fault cluster for this module."""
    name = f"ntkfault_{uuid.uuid4().hex[:12]}"
    admin = create_engine(fault_postgres.url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(fault_postgres.url).set(database=name).render_as_string(hide_password=False)
    try:
        localstack.migrate(url)
        yield url
    finally:
        if not fault_postgres.answers():
            fault_postgres.start()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="module")
def fault_stack(
    fault_database: str,
    fault_redis: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[LocalStack]:
    """An API and one worker on the fault servers; a module sets `STACK_SETTINGS` to change settings."""
    settings = (
        QUICK_RECOVERY_SETTINGS
        | getattr(request.module, "STACK_SETTINGS", {})
        | {
            "NTKLAB_DATABASE_URL": fault_database,
            "NTKLAB_BROKER_URL": fault_redis.url,
            "NTKLAB_QUEUE": f"ntkfault-{uuid.uuid4().hex[:8]}",
        }
    )
    stack = LocalStack(settings, tmp_path_factory.mktemp("fault-logs"))
    try:
        stack.start_api()
        stack.start_worker()
    except StackError as error:
        stack.stop()
        pytest.fail(str(error), pytrace=False)
    yield stack
    stack.stop()
