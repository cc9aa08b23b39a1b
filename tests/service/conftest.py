"""Fixtures for the API tests: every test gets a fresh database made by `alembic upgrade head`.

`database_url` runs each test twice: on a SQLite file and on a PostgreSQL database (from
NTKLAB_TEST_DATABASE_URL; unreachable PostgreSQL fails the test under `make test` and skips it
elsewhere, see tests/server_checks.py).
A migrated template is made once per session and copied per test (file copy for SQLite,
CREATE DATABASE … TEMPLATE for PostgreSQL, where the copy a finished test leaves is emptied and
handed to the next test while its schema is still the template's: tests/postgres_reuse.py), so every
test starts from an empty migrated schema.
The broker is the embedded filesystem transport in the test's tmp_path.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.orm import Session

from ntklab.config.settings import Settings
from ntklab.service.app import create_app
from ntklab.store.migrate import alembic_config as packaged_alembic_config
from tests.postgres_reuse import ReusedDatabases

BACKENDS = ("sqlite", "postgresql")


def alembic_config(url: str) -> Config:
    return packaged_alembic_config(url, configure_logging=False)


def upgrade_head(url: str) -> None:
    command.upgrade(alembic_config(url), "head")


class PostgresDatabases:
    """CREATE/DROP DATABASE on the test server; names are random so parallel sessions never collide."""

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.admin = create_engine(server_url, isolation_level="AUTOCOMMIT")

    def create(self, template: str | None = None) -> str:
        name = f"ntklab_t_{uuid.uuid4().hex[:12]}"
        clause = f' TEMPLATE "{template}"' if template else ""
        with self.admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"{clause}'))
        return name

    def url(self, name: str) -> str:
        return make_url(self.server_url).set(database=name).render_as_string(hide_password=False)

    def drop(self, name: str) -> None:
        with self.admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def alembic_for():
    """alembic_for(url) → the Alembic Config of this repo pointed at `url`."""
    return alembic_config


@pytest.fixture(scope="session")
def postgres_databases(postgres_server: str) -> Iterator[PostgresDatabases]:
    databases = PostgresDatabases(postgres_server)
    yield databases
    databases.admin.dispose()


@pytest.fixture(scope="session")
def postgres_template(postgres_databases: PostgresDatabases) -> Iterator[str]:
    name = postgres_databases.create()
    upgrade_head(postgres_databases.url(name))
    yield name
    postgres_databases.drop(name)


@pytest.fixture(scope="session")
def postgres_copies(postgres_databases: PostgresDatabases, postgres_template: str) -> Iterator[ReusedDatabases]:
    """Copies of the template, each emptied and handed to the next test (tests/postgres_reuse.py)."""
    copies = ReusedDatabases(postgres_databases, postgres_template)
    yield copies
    copies.close()


@pytest.fixture
def fresh_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(backend, URL) of an empty, unmigrated database; the test's parameter picks the backend."""
    backend = request.param
    if backend == "sqlite":
        yield backend, f"sqlite:///{tmp_path / 'empty.db'}"
        return
    databases: PostgresDatabases = request.getfixturevalue("postgres_databases")
    name = databases.create()
    try:
        yield backend, databases.url(name)
    finally:
        databases.drop(name)


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database of its own for this test."""
    if request.param == "sqlite":
        path = tmp_path / "ntklab.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    copies: ReusedDatabases = request.getfixturevalue("postgres_copies")
    name = copies.take()
    try:
        yield copies.databases.url(name)
    finally:
        copies.give_back(name)


def make_settings(database_url: str, tmp_path: Path, **overrides) -> Settings:
    defaults = {
        "database_url": database_url,
        "broker_url": "filesystem://",
        "broker_dir": tmp_path / "broker",
        "queue": f"ntklab-test-{uuid.uuid4().hex[:8]}",
        "public_url": "http://testserver",
        "reaper_enabled": False,
    }
    return Settings(**defaults | overrides)


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return make_settings(database_url, tmp_path)


@pytest.fixture
def app(settings: Settings) -> FastAPI:
    return create_app(settings)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    """A client whose unexpected server errors raise in the test instead of becoming a quiet 500."""
    with TestClient(app, raise_server_exceptions=True) as test_client:
        yield test_client


@pytest.fixture
def client_with(database_url: str, tmp_path: Path) -> Iterator:
    """client_with(**settings) → a TestClient on this test's database with those settings changed."""
    with contextlib.ExitStack() as stack:

        def make(**overrides) -> TestClient:
            app = create_app(make_settings(database_url, tmp_path, **overrides))
            return stack.enter_context(TestClient(app, raise_server_exceptions=True))

        yield make


@pytest.fixture
def db(app: FastAPI) -> Iterator[Session]:
    """A session on the app's database, for arranging rows a worker would write."""
    with app.state.sessions() as session:
        yield session
