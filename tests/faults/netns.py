"""Hosts of one LAN on this machine: a network namespace per host, all cabled to one bridge.

    lan = Lan(["server", "hosta", "hostb"]); lan.create()
    subprocess.Popen([*lan.run_in("hosta"), "python", ...])   a process on host "hosta"
    lan.address("server")                                      "10.213.N.10", its address on the LAN
    lan.cut("hosta"); lan.restore("hosta")                     its cable out (link down) and back in
    lan.remove()

A namespace `<name>-switch` holds the bridge; each host's namespace gets a veth pair,
`eth0` inside the host and a port on the bridge, and one /24 (`10.213.N.0/24`, N picked
so that it overlaps no network this machine routes). This machine's own namespace, where
the test runs, is cabled to the bridge too (address .254), so the test reaches the hosts
as a client on the LAN would. Names carry the pid of the process that made them
(`ntkh<pid>-…`): parallel runs do not collide, and `remove_leftovers` deletes only those
whose process is gone. Needs root and `ip netns`.
"""

from __future__ import annotations

import os
import signal
import subprocess

PREFIX = "ntkh"
BRIDGE = "br0"
HOST_LINK = "eth0"
CLIENT_ADDRESS = 254


class NetnsError(RuntimeError):
    """An `ip` command failed; the message holds the command and its stderr."""


def ip(*arguments: str) -> str:
    done = subprocess.run(["ip", *arguments], capture_output=True, text=True)
    if done.returncode:
        raise NetnsError(f"ip {' '.join(arguments)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def netns_unavailable() -> str | None:
    """Why this process cannot build a LAN of namespaces, or None if it can."""
    if os.geteuid() != 0:
        return "building hosts from network namespaces and veth pairs needs root: run it as root (CI does)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        ip("netns", "add", probe)
        ip("netns", "delete", probe)
    except (NetnsError, FileNotFoundError) as error:
        return f"`ip netns` is not available here: {error}"
    return None


class Lan:
    """Hosts `hosts` (namespaces) on one bridge; host i has address 10.213.N.(10 + i)."""

    def __init__(self, hosts: list[str]):
        self.name = f"{PREFIX}{os.getpid()}"
        self.hosts = list(hosts)
        self.subnet = _free_subnet(os.getpid())
        self.cidr = f"{self.subnet}.0/24"

    def namespace(self, host: str) -> str:
        return f"{self.name}-{host}"

    def address(self, host: str) -> str:
        return f"{self.subnet}.{10 + self.hosts.index(host)}"

    def run_in(self, host: str) -> list[str]:
        """The command prefix that runs a program on `host` (inside its namespace)."""
        return ["ip", "netns", "exec", self.namespace(host)]

    def create(self) -> None:
        switch = self.namespace("switch")
        ip("netns", "add", switch)
        ip("-n", switch, "link", "add", BRIDGE, "type", "bridge")
        ip("-n", switch, "link", "set", BRIDGE, "up")
        for index, host in enumerate(self.hosts):
            namespace = self.namespace(host)
            ip("netns", "add", namespace)
            ip("-n", namespace, "link", "set", "lo", "up")
            ip(
                "-n",
                namespace,
                "link",
                "add",
                HOST_LINK,
                "type",
                "veth",
                "peer",
                "name",
                f"port{index}",
                "netns",
                switch,
            )
            self._plug(f"port{index}")
            ip("-n", namespace, "addr", "add", f"{self.address(host)}/24", "dev", HOST_LINK)
            ip("-n", namespace, "link", "set", HOST_LINK, "up")
        ip("link", "add", self.name, "type", "veth", "peer", "name", "client", "netns", switch)
        self._plug("client")
        ip("addr", "add", f"{self.subnet}.{CLIENT_ADDRESS}/24", "dev", self.name)
        ip("link", "set", self.name, "up")

    def cut(self, host: str) -> None:
        """Pull `host`'s cable: its link goes down, so nothing it sends or is sent reaches anyone."""
        ip("-n", self.namespace(host), "link", "set", HOST_LINK, "down")

    def restore(self, host: str) -> None:
        ip("-n", self.namespace(host), "link", "set", HOST_LINK, "up")

    def remove(self) -> None:
        """Delete this machine's cable to the bridge, kill what still runs in the namespaces and delete them."""
        if subprocess.run(["ip", "link", "show", "dev", self.name], capture_output=True).returncode == 0:
            ip("link", "delete", self.name)
        for host in [*self.hosts, "switch"]:
            _delete_namespace(self.namespace(host))

    def _plug(self, port: str) -> None:
        ip("-n", self.namespace("switch"), "link", "set", port, "master", BRIDGE, "up")


def remove_leftovers() -> None:
    """Delete the namespaces of earlier runs whose process is gone (killed before its teardown)."""
    for namespace in _namespaces():
        owner = namespace.removeprefix(PREFIX).split("-")[0]
        if namespace.startswith(PREFIX) and owner.isdigit() and not _alive(int(owner)):
            _delete_namespace(namespace)


def _namespaces() -> list[str]:
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def _delete_namespace(namespace: str) -> None:
    if namespace not in _namespaces():
        return
    for pid in ip("netns", "pids", namespace).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    ip("netns", "delete", namespace)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _free_subnet(seed: int) -> str:
    """The first 10.213.N (N from `seed`) that no address or route of this machine uses."""
    taken = ip("-4", "route", "show", "table", "all") + ip("-4", "addr")
    for offset in range(256):
        subnet = f"10.213.{(seed + offset) % 256}"
        if f"{subnet}." not in taken:
            return subnet
    raise NetnsError("every 10.213.N.0/24 is in use on this machine")
