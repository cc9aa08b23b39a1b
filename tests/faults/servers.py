"""Servers of the fault tests' own, which the tests kill and restart.

The shared PostgreSQL (5432) and Redis (6390) of the other tests are never touched: these
tests start a Redis on a free port (no persistence, so a restart loses every message) and a
PostgreSQL cluster `ntkfault` (created once with pg_createcluster, started and stopped with
pg_ctlcluster). Creating and controlling a cluster needs root, as in CI. The many-hosts
test runs its servers on a host of its own (a network namespace, see netns.py): Redis
there, and a `ScratchPostgres` cluster made with initdb in a temporary folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ntklab.localstack import free_port, wait_until

CLUSTER = "ntkfault"
ROLE = "ntkfault"
SERVER_TIMEOUT_S = 30


class RedisServer:
    """`redis-server` on `host`:`port` (127.0.0.1 by default) with no persistence and no protected mode
    (a test network only); `kill` is a crash, `start` an empty server."""

    def __init__(self, port: int, workdir: Path, host: str = "127.0.0.1", launch: Sequence[str] = ()):
        """`launch` is a command prefix the server and `redis-cli` run under, e.g. `ip netns exec NS`
        for a server on another (namespaced) host listening on that host's address `host`."""
        self.port, self.workdir, self.host, self.launch = port, workdir, host, list(launch)
        self.pidfile = workdir / "redis.pid"
        self.url = f"redis://{host}:{port}/0"

    def start(self) -> None:
        subprocess.run(
            [
                *self.launch,
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                self.host,
                "--protected-mode",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "yes",
                "--dir",
                str(self.workdir),
                "--pidfile",
                str(self.pidfile),
                "--logfile",
                str(self.workdir / "redis.log"),
            ],
            check=True,
            capture_output=True,
        )
        wait_until(self.answers, SERVER_TIMEOUT_S, f"redis-server on port {self.port} never answered", every_s=0.1)

    def kill(self) -> None:
        os.kill(int(self.pidfile.read_text()), signal.SIGKILL)
        wait_until(lambda: not self.answers(), SERVER_TIMEOUT_S, f"redis on port {self.port} still answers")
        self.pidfile.unlink(missing_ok=True)

    def answers(self) -> bool:
        done = subprocess.run(
            [*self.launch, "redis-cli", "-h", self.host, "-p", str(self.port), "ping"], capture_output=True, text=True
        )
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
        for line in subprocess.run(
            ["pg_lsclusters", "--no-header"], capture_output=True, text=True
        ).stdout.splitlines():
            version, name, port, *_ = line.split()
            if (version, name) == (self.version, CLUSTER):
                return int(port)
        raise RuntimeError(f"cluster {self.version}/{CLUSTER} not listed by pg_lsclusters")


class ScratchPostgres:
    """A throwaway PostgreSQL cluster for a server on another host: `initdb` into a temporary
    folder (superuser `ROLE`, trust authentication), listening on `host`:5432 and trusting
    `clients` (a CIDR), started under `launch` (e.g. `ip netns exec NS`); `stop` deletes it.

    `options` are server settings (`-c name=value`). Runs as the `postgres` user: needs root.
    """

    PORT = 5432

    def __init__(self, host: str, clients: str, launch: Sequence[str] = (), options: dict[str, str] | None = None):
        self.host, self.clients, self.launch, self.options = host, clients, list(launch), options or {}
        self.bin = Path("/usr/lib/postgresql", sorted(os.listdir("/usr/lib/postgresql"), key=int)[-1], "bin")
        self.datadir: Path | None = None
        self.url = f"postgresql+psycopg://{ROLE}@{host}:{self.PORT}/postgres"

    def start(self) -> None:
        self.datadir = Path(tempfile.mkdtemp(prefix="ntkscratch-pg-"))
        shutil.chown(self.datadir, "postgres", "postgres")
        _run(
            "runuser",
            "-u",
            "postgres",
            "--",
            str(self.bin / "initdb"),
            "-D",
            str(self.datadir),
            "-U",
            ROLE,
            "-A",
            "trust",
            "--no-sync",
        )
        with open(self.datadir / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {self.clients} trust\n")
        settings = {
            "listen_addresses": self.host,
            "port": str(self.PORT),
            "unix_socket_directories": str(self.datadir),
            "fsync": "off",
        } | self.options
        _run(
            *self.launch,
            "runuser",
            "-u",
            "postgres",
            "--",
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.datadir),
            "-l",
            str(self.datadir / "server.log"),
            "-w",
            "-t",
            str(SERVER_TIMEOUT_S),
            "-o",
            " ".join(f"-c {name}={value}" for name, value in settings.items()),
            "start",
        )

    def stop(self) -> None:
        if self.datadir is None:
            return
        if (self.datadir / "postmaster.pid").exists():
            _run(
                "runuser",
                "-u",
                "postgres",
                "--",
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.datadir),
                "stop",
                "-m",
                "immediate",
            )
        shutil.rmtree(self.datadir)
        self.datadir = None


def _run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, cwd="/")
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip()
