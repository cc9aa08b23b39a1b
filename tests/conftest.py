"""Fixtures for the real servers: PostgreSQL, Redis, and live ntklab stacks (API + celery worker).

`make test` starts PostgreSQL and Redis with scripts/services.sh and exports
NTKLAB_TEST_DATABASE_URL / NTKLAB_TEST_REDIS_URL and NTKLAB_REQUIRE_SERVERS=1: there a test
that asks for a server that does not answer fails, saying how to start it. Without
NTKLAB_REQUIRE_SERVERS (`make test-fast`, a bare pytest) it is skipped with that reason
(tests/server_checks.py).

Tiers: every test that needs PostgreSQL or Redis is marked `stack` at collection (see
needs_servers), so `make test-fast` (`-m "not slow and not stack"`) runs on SQLite and the
filesystem broker alone.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from ntklab import localstack
from ntklab.localstack import QUICK_RECOVERY_SETTINGS, LocalStack, StackError
from ntklab.store.migrate import upgrade
from tests.server_checks import require_postgres, require_redis

TEST_DATABASE_URL = os.environ.get(
    "NTKLAB_TEST_DATABASE_URL", "postgresql+psycopg://ntklab:ntklab@127.0.0.1:5432/ntklab_test"
)
TEST_REDIS_URL = os.environ.get("NTKLAB_TEST_REDIS_URL", "redis://127.0.0.1:6390/0")

SERVER_FIXTURES = frozenset({"postgres_server", "redis_url"})
"""Fixtures that reach a server; a test whose fixture closure holds one needs the servers."""
SERVER_BACKINGS = frozenset({"postgresql", "postgres+redis"})
"""Parameter values that pick the PostgreSQL (+ Redis) backing in the database/stack fixtures, which ask
for the server fixtures only at run time (request.getfixturevalue), out of sight of the fixture closure."""


# --------------------------------------------------------------------------- tiers


def needs_servers(item: pytest.Item) -> bool:
    """Whether this test reaches PostgreSQL or Redis: through a server fixture or a server-backed parameter."""
    if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(
        isinstance(value, str) and value in SERVER_BACKINGS for value in callspec.params.values()
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `stack` every test that needs the servers, before `-m` selects (hence tryfirst)."""
    for item in items:
        if needs_servers(item):
            item.add_marker(pytest.mark.stack)


# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The URL of a reachable PostgreSQL database whose role may create databases (skip or fail if none)."""
    return require_postgres(TEST_DATABASE_URL)


@pytest.fixture(scope="module")
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh database for this test module, migrated with `alembic upgrade head`, dropped afterwards."""
    name = f"ntklab_t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(postgres_server).set(database=name).render_as_string(hide_password=False)
    try:
        migrate(url)
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The URL of a reachable Redis (skip or fail if none)."""
    return require_redis(TEST_REDIS_URL)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per session (`alembic upgrade head`, in process); a test that needs a
    fresh migrated database copies it (a file copy, where an upgrade of the 17 revisions takes 1–2 s)."""
    path = tmp_path_factory.mktemp("template") / "ntklab.db"
    upgrade(f"sqlite:///{path}", configure_logging=False)
    return path


def migrate(database_url: str) -> None:
    try:
        localstack.migrate(database_url)
    except StackError as error:
        pytest.fail(str(error), pytrace=False)


# --------------------------------------------------------------------------- stacks


@pytest.fixture(scope="module")
def sqlite_stack(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Settings of the embedded default: a migrated SQLite file and a filesystem broker, both in tmp."""
    root = tmp_path_factory.mktemp("embedded")
    url = f"sqlite:///{root / 'ntklab.db'}"
    migrate(url)
    return stack_settings(url, "filesystem://", broker_dir=root / "broker")


@pytest.fixture(scope="module")
def postgres_redis_stack(postgres_url: str, redis_url: str) -> Iterator[dict[str, str]]:
    """Settings of the full stack: a fresh PostgreSQL database and Redis, with a queue of this module's own."""
    import redis

    settings = stack_settings(postgres_url, redis_url)
    yield settings
    client = redis.Redis.from_url(redis_url)
    queue = settings["NTKLAB_QUEUE"]
    for key in client.scan_iter(f"*{queue}*"):
        client.delete(key)
    client.close()


def stack_settings(database_url: str, broker_url: str, broker_dir: Path | None = None) -> dict[str, str]:
    settings = QUICK_RECOVERY_SETTINGS | {
        "NTKLAB_DATABASE_URL": database_url,
        "NTKLAB_BROKER_URL": broker_url,
        "NTKLAB_QUEUE": f"ntklab-test-{uuid.uuid4().hex[:8]}",
    }
    if broker_dir is not None:
        settings["NTKLAB_BROKER_DIR"] = str(broker_dir)
    return settings


class LiveStack(LocalStack):
    """ntklab.localstack.LocalStack whose start-up failures fail the test with the log's name."""

    def start_api(self) -> None:
        try:
            super().start_api()
        except StackError as error:
            pytest.fail(str(error), pytrace=False)

    def start_workers(self, count: int):
        try:
            return super().start_workers(count)
        except StackError as error:
            pytest.fail(str(error), pytrace=False)


@contextmanager
def served(settings: dict[str, str], logs: Path) -> Iterator[LiveStack]:
    """A LiveStack on `settings` with its API and one worker running, stopped on exit."""
    stack = LiveStack(settings, logs)
    try:
        stack.start_api()
        stack.start_worker()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module", params=["postgres+redis", "sqlite+filesystem"])
def live_stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """A running API and one worker on either stack; torch is imported once per module and stack."""
    backing = "postgres_redis_stack" if request.param == "postgres+redis" else "sqlite_stack"
    with served(request.getfixturevalue(backing), tmp_path_factory.mktemp("logs")) as stack:
        yield stack
