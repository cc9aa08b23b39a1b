"""An unreachable test server skips the test, except where NTKLAB_REQUIRE_SERVERS=1 (make test, CI) fails it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server_checks import REQUIRE_SERVERS, require_postgres, require_redis

REPO = Path(__file__).parent.parent


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: bound, then released, so a connect is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def urls(port: int) -> dict[str, tuple]:
    return {
        "PostgreSQL": (require_postgres, f"postgresql+psycopg://ntklab:ntklab@127.0.0.1:{port}/ntklab_test"),
        "Redis": (require_redis, f"redis://127.0.0.1:{port}/0"),
    }


@pytest.mark.parametrize("server", ["PostgreSQL", "Redis"])
def test_an_unreachable_server_skips_with_its_url_as_the_reason(server, closed_port, monkeypatch):
    monkeypatch.delenv(REQUIRE_SERVERS, raising=False)
    require, url = urls(closed_port)[server]
    with pytest.raises(pytest.skip.Exception) as skipped:
        require(url)
    assert f"{server} is not reachable at {url}" in str(skipped.value)
    assert "scripts/services.sh" in str(skipped.value)


@pytest.mark.parametrize("server", ["PostgreSQL", "Redis"])
def test_an_unreachable_server_fails_where_servers_are_required(server, closed_port, monkeypatch):
    monkeypatch.setenv(REQUIRE_SERVERS, "1")
    require, url = urls(closed_port)[server]
    with pytest.raises(pytest.fail.Exception) as failed:
        require(url)
    assert f"{server} is not reachable at {url}" in str(failed.value)
    assert f"{REQUIRE_SERVERS}=1" in str(failed.value)


def test_services_sh_requires_the_servers():
    """make test takes its environment from scripts/services.sh: that is what makes CI fail instead of skip."""
    script = (REPO / "scripts" / "services.sh").read_text()
    assert f'echo "{REQUIRE_SERVERS}=1"' in script


def test_tests_on_a_server_backing_are_marked_stack_at_collection():
    """`-m "not stack"` (make test-fast) keeps the SQLite cases of database_url / live-stack tests, none on the servers."""
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not stack",
            "tests/service/test_auth.py",
            "tests/integration/test_claims_and_reaper.py",
            "tests/service/test_limits.py",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    ids = [line for line in listed.splitlines() if "::" in line]
    assert any("[sqlite" in test for test in ids), listed
    assert not [test for test in ids if "postgres" in test or "redis" in test], listed
