"""The active-jobs quota holds across API processes on one SQLite file (the embedded default).

One process reserves the owner's last slot and, before it commits, another process asks for
a slot too: the second must wait for the first commit, count its job and be refused. A
quota that only locked within a process would let both in (two active jobs over a cap of 1).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sqlalchemy import func, select

from ntklab.api_schemas.spec import JobSpec
from ntklab.config.settings import Settings
from ntklab.localstack import migrate
from ntklab.service import quota
from ntklab.store import jobs_repo
from ntklab.store.db import make_engine, make_session_factory
from ntklab.store.models import Job

REPO = Path(__file__).resolve().parents[2]

OWNER = "alice"
SECOND_PROCESS = textwrap.dedent("""
    import sys
    from ntklab.api_schemas.spec import JobSpec
    from ntklab.service import quota
    from ntklab.store import jobs_repo
    from ntklab.store.db import make_engine, make_session_factory
    from ntklab.service.problems import ProblemError
    from ntklab.config.settings import Settings

    settings = Settings(database_url=sys.argv[1], max_queued_jobs_per_key=1)
    with make_session_factory(make_engine(settings.database_url))() as session:
        print("asking", flush=True)
        try:
            with quota.reserve(session, "alice", 1, settings):
                jobs_repo.create_job(session, owner="alice", spec=JobSpec().model_dump(mode="json"), spec_hash="b", parameters=0, idempotency_key=None)
                session.commit()
        except ProblemError as refused:
            print("refused", refused.status_code)
        else:
            print("admitted")
""")


def test_a_second_process_waits_for_the_first_commit_and_is_refused(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'ntklab.db'}"
    migrate(url)
    settings = Settings(database_url=url, max_queued_jobs_per_key=1)
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            with quota.reserve(session, OWNER, 1, settings):
                jobs_repo.create_job(
                    session,
                    owner=OWNER,
                    spec=JobSpec().model_dump(mode="json"),
                    spec_hash="a",
                    parameters=0,
                    idempotency_key=None,
                )
                second = subprocess.Popen(
                    [sys.executable, "-c", SECOND_PROCESS, url],
                    cwd=REPO,
                    text=True,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                assert second.stdout.readline().strip() == "asking"
                time.sleep(1.0)
                assert second.poll() is None, "the second process waits while the first holds the reservation"
                session.commit()
            out, err = second.communicate(timeout=60)
        assert out.strip() == "refused 429", err
        with make_session_factory(engine)() as session:
            assert session.scalar(select(func.count()).select_from(Job).where(Job.owner == OWNER)) == 1
    finally:
        engine.dispose()
