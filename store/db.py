"""Engines and sessions for the one SQL database (SQLite embedded, PostgreSQL full stack).

SQLite runs in WAL mode with a busy timeout and foreign keys on (the schema deletes a
job's metric chunks, tags and artifacts by ON DELETE CASCADE); the API's threadpool and
the worker share the file. PostgreSQL connections are checked before use, so the pool
recovers by itself after the server restarts. The API sizes its threadpool to its pool
(settings.database_pool_size) so that requests never open overflow connections: one
opened and closed per request costs PostgreSQL a server process each time, and halved the
read throughput under load. Each API process holds up to pool_size + MAX_OVERFLOW
connections (MAX_OVERFLOW for the reaper and the metrics scrape).

Reads (GET and HEAD requests) run on autocommit connections from the same pool: each
statement is its own transaction, so a read sends no BEGIN and no ROLLBACK — two of the
five round trips a poll of a job cost. No read needs a snapshot across its statements:
a job row is one statement, and metric chunks are only ever appended.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 30_000
MAX_OVERFLOW = 4
POSTGRES_CONNECT_TIMEOUT_S = 5
POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT_MS = 60_000
"""PostgreSQL ends a session of ours left idle inside a transaction this long. Every transaction
here is a few statements long; one left open is a worker whose link died between a heartbeat's
UPDATE and its COMMIT, and it would hold the job row's lock — and block the reaper's re-queue —
until TCP keepalive gave up on it (about 2 h by default)."""


class ConstraintViolation(Exception):
    """A commit the database refused for a constraint (rolled back): e.g. a concurrent request stored the same
    Idempotency-Key first (uq_jobs_owner_idempotency_key, ix_sweeps_owner_idempotency_key)."""


@contextlib.contextmanager
def violations_raised(session: Session) -> Iterator[None]:
    """Run the block (its inserts, flushes and commit); a constraint violation in it rolls the session back and
    raises ConstraintViolation."""
    try:
        yield
    except IntegrityError as error:
        session.rollback()
        raise ConstraintViolation(str(error.orig)) from error


def answers(session: Session) -> bool:
    """Whether the database answers SELECT 1 (readiness); a failure is logged, not raised."""
    try:
        session.execute(text("SELECT 1"))
        return True
    except SQLAlchemyError as error:
        log.warning("database not ready: %s", error)
        return False


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def make_engine(url: str, *, pool_size: int = 5) -> Engine:
    if is_sqlite(url):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(
        url,
        pool_size=pool_size,
        max_overflow=MAX_OVERFLOW,
        pool_pre_ping=True,
        connect_args={
            "connect_timeout": POSTGRES_CONNECT_TIMEOUT_S,
            "options": f"-c idle_in_transaction_session_timeout={POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT_MS}",
        },
    )


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def make_read_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions for requests that only read: autocommit connections (no BEGIN, no ROLLBACK)."""
    return sessionmaker(bind=engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False)


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
