"""PostgreSQL sessions the store opens: one left idle inside a transaction is ended by the server."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from ntklab.store import db


def test_a_transaction_left_idle_is_ended_by_the_server(postgres_server, monkeypatch):
    """A worker whose link died mid-transaction must not hold a job row's lock until TCP keepalive
    gives up (hours): PostgreSQL closes our sessions idle in a transaction past the timeout."""
    monkeypatch.setattr(db, "POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT_MS", 300)
    engine = db.make_engine(postgres_server)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("SHOW idle_in_transaction_session_timeout")).scalar() == "300ms"
            time.sleep(1.0)
            with pytest.raises(DBAPIError, match="idle-in-transaction timeout"):
                connection.execute(text("SELECT 1"))
        with engine.connect() as connection:  # the pool recovers: pre-ping replaces the closed connection
            assert connection.execute(text("SELECT 1")).scalar() == 1
    finally:
        engine.dispose()
