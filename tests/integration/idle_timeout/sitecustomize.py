"""Loaded at start-up by every Python process whose PYTHONPATH begins with this folder (tests/integration/
test_stalled_uploads.py puts it there for a live API): ntklab.store.db.POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT_MS,
the idle-in-transaction timeout make_engine gives PostgreSQL for every session, set to
NTKLAB_TEST_IDLE_IN_TRANSACTION_TIMEOUT_MS, and a line on stderr (the API's log) saying so."""

import os
import sys

if os.environ.get("NTKLAB_TEST_IDLE_IN_TRANSACTION_TIMEOUT_MS"):
    import ntklab.store.db

    ntklab.store.db.POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT_MS = int(
        os.environ["NTKLAB_TEST_IDLE_IN_TRANSACTION_TIMEOUT_MS"]
    )
    print(
        f"idle_in_transaction_session_timeout = {ntklab.store.db.POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT_MS} ms",
        file=sys.stderr,
        flush=True,
    )
