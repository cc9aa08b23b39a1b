"""Servers of the fault tests' own, which the tests kill and restart.

The shared PostgreSQL (5432) and Redis (6390) of the other tests are never touched: these
tests start a Redis on a free port (no persistence, so a restart loses every message) and a
PostgreSQL cluster `ntkfault` (created once with pg_createcluster, started and stopped with
pg_ctlcluster). Creating and controlling a cluster needs root, as in CI.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from ntklab.localstack import free_port, wait_until

CLUSTER = "ntkfault"
ROLE = "ntkfault"
SERVER_TIMEOUT_S = 30


class RedisServer:
    """`redis-server` on 127.0.0.1:`port` with no persistence; `kill` is a crash, `start` an empty server."""

    def __init__(self, port: int, workdir: Path):
        self.port, self.workdir = port, workdir
        self.pidfile = workdir / "redis.pid"
        self.url = f"redis://127.0.0.1:{port}/0"

    def start(self) -> None:
        subprocess.run(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "yes", "--dir", str(self.workdir), "--pidfile", str(self.pidfile),
             "--logfile", str(self.workdir / "redis.log")],
            check=True, capture_output=True,
        )
        wait_until(self.answers, SERVER_TIMEOUT_S, f"redis-server on port {self.port} never answered", every_s=0.1)

    def kill(self) -> None:
        os.kill(int(self.pidfile.read_text()), signal.SIGKILL)
        wait_until(lambda: not self.answers(), SERVER_TIMEOUT_S, f"redis on port {self.port} still answers")
        self.pidfile.unlink(missing_ok=True)

    def answers(self) -> bool:
        done = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True)
        return done.stdout.strip() == "PONG"


class PostgresCluster:
    """The `ntkfault` cluster of the newest installed PostgreSQL; `stop` is `pg_ctlcluster stop -m fast`."""

    def __init__(self):
        self.version = sorted(os.listdir("/usr/lib/postgresql"), key=int)[-1]
        if CLUSTER not in subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True).stdout:
            _run("pg_createcluster", self.version, CLUSTER, "--port", str(free_port()))
        self.port = self._port()
        self.url = f"postgresql+psycopg://{ROLE}:{ROLE}@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start the cluster; one left running by an interrupted test session is taken as it is."""
        if self.answers():
            return
        _run("pg_ctlcluster", "--skip-systemctl-redirect", self.version, CLUSTER, "start")
        wait_until(self.answers, SERVER_TIMEOUT_S, f"PostgreSQL cluster {CLUSTER} never answered", every_s=0.1)

    def stop(self) -> None:
        _run("pg_ctlcluster", "--skip-systemctl-redirect", self.version, CLUSTER, "stop", "-m", "fast")

    def answers(self) -> bool:
        return subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode == 0

    def ensure_role(self) -> None:
        exists = self.psql(f"SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}'")
        if exists != "1":
            self.psql(f"CREATE ROLE {ROLE} LOGIN SUPERUSER PASSWORD '{ROLE}'")

    def psql(self, sql: str) -> str:
        return _run("runuser", "-u", "postgres", "--", "psql", "-p", str(self.port), "-qtAc", sql)

    def _port(self) -> int:
        for line in subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True).stdout.splitlines():
            version, name, port, *_ = line.split()
            if (version, name) == (self.version, CLUSTER):
                return int(port)
        raise RuntimeError(f"cluster {self.version}/{CLUSTER} not listed by pg_lsclusters")


def _run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, cwd="/")
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip()
