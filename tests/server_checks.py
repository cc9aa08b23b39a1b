"""Is the test PostgreSQL / Redis reachable, and what a test does when it is not.

`make test` (CI) runs scripts/services.sh, which starts both servers and exports
NTKLAB_REQUIRE_SERVERS=1: there an unreachable server fails the test loudly, so that CI never
passes by skipping the real parts. Anywhere else (`make test-fast`, a bare `pytest` on a laptop)
a test that needs a server which does not answer is skipped, with the URL and the error as the
reason.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

REQUIRE_SERVERS = "NTKLAB_REQUIRE_SERVERS"
HOW_TO_START = (
    "start the servers with `scripts/services.sh` (make test does) "
    "or set NTKLAB_TEST_DATABASE_URL / NTKLAB_TEST_REDIS_URL"
)
CONNECT_TIMEOUT_S = 5


def servers_required() -> bool:
    """True where the environment says the servers must be there (scripts/services.sh sets it)."""
    return os.environ.get(REQUIRE_SERVERS) == "1"


def unreachable(server: str, url: str, error: object) -> NoReturn:
    """Fail (servers required) or skip (otherwise) the current test, naming the server, URL and error."""
    message = f"{server} is not reachable at {url}: {error}. {HOW_TO_START}"
    if servers_required():
        pytest.fail(f"{message} ({REQUIRE_SERVERS}=1: the servers must be up)", pytrace=False)
    pytest.skip(message)


def require_postgres(url: str) -> str:
    """`url` if a PostgreSQL server answers `SELECT 1` there; otherwise unreachable()."""
    engine = create_engine(url, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError as error:
        unreachable("PostgreSQL", url, error.orig)
    finally:
        engine.dispose()
    return url


def require_redis(url: str) -> str:
    """`url` if a Redis server answers PING there; otherwise unreachable()."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=CONNECT_TIMEOUT_S, socket_connect_timeout=CONNECT_TIMEOUT_S)
    try:
        client.ping()
    except redis.RedisError as error:
        unreachable("Redis", url, error)
    finally:
        client.close()
    return url
