"""An unreachable test server skips the test, except where NTKLAB_REQUIRE_SERVERS=1 (make test, CI) fails it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.server_checks import REQUIRE_SERVERS, require_postgres, require_redis


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
    script = (Path(__file__).parent.parent / "scripts" / "services.sh").read_text()
    assert f'echo "{REQUIRE_SERVERS}=1"' in script
