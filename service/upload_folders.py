"""The folders uploads are received in, and sweeping those a crashed API process left behind.

Each upload gets its own folder under `settings.upload_dir` (default: the system's temporary
folder), removed when its request ends. A process killed mid-upload (SIGKILL, OOM killer,
power loss) removes nothing, so the folder's name says whose it is:

    ntklab-upload-<host>~<boot id>~<pid>~<process start>-<random>

At start-up every API process sweeps the folders whose process is gone: on this host and
since this boot, a pid that no longer runs or now names a process started at another time
(the pid was reused); on this host, any boot but the current one. A folder naming another
host (a shared volume; two containers share a boot id but not, by default, a host name) or
named otherwise (from before this scheme) is removed only once nothing in it has changed
for `stale_after_s`, longer than any upload may take. So API processes sharing the folder
(uvicorn --workers N, or several replicas) never remove each other's live uploads.
The process start is field 22 of /proc/<pid>/stat (clock ticks since boot); where /proc is
missing (macOS) a pid is taken to be its process while it runs.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "ntklab-upload-"
NAME = re.compile(r"^ntklab-upload-(?P<host>[A-Za-z0-9_.]+)~(?P<boot>[0-9a-f]*)~(?P<pid>\d+)~(?P<start>\d*)-[^-]+$")


def temporary_folder(root: Path | None) -> tempfile.TemporaryDirectory:
    """A new folder for one upload, named after this process; removed when the block ends."""
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=f"{PREFIX}{_identity(os.getpid())}-", dir=root)


@dataclass(frozen=True)
class Swept:
    folders: int
    bytes: int


def sweep(root: Path | None, stale_after_s: float) -> Swept:
    """Remove the upload folders under `root` (None: the system's temporary folder) whose process is gone."""
    root = Path(tempfile.gettempdir()) if root is None else root
    folders = total = 0
    try:
        entries = [entry for entry in os.scandir(root) if entry.name.startswith(PREFIX)]
    except FileNotFoundError:
        return Swept(0, 0)
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False) or not _abandoned(entry.name, Path(entry.path), stale_after_s):
            continue
        size = _size(Path(entry.path))
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.exists(entry.path):
            folders, total = folders + 1, total + size
    if folders:
        log.warning(
            "removed %d upload folders (%d bytes) under %s left by API processes that are gone", folders, total, root
        )
    return Swept(folders, total)


def _abandoned(name: str, path: Path, stale_after_s: float) -> bool:
    found = NAME.match(name)
    if found is None or found["host"] != _host():
        return _unchanged_for(path) > stale_after_s
    if found["boot"] != _boot_id():
        return True
    pid = int(found["pid"])
    started = _started(pid)
    return started is None or (started != "" and found["start"] != "" and started != found["start"])


def _identity(pid: int) -> str:
    return f"{_host()}~{_boot_id()}~{pid}~{_started(pid) or ''}"


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:64] or "host"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:16]
    except OSError:
        return ""


def _started(pid: int) -> str | None:
    """The process's start (clock ticks since boot), "" when it runs but its start is unknown, None when it is gone."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        return "" if _runs(pid) else None
    except OSError:
        return ""
    return line.rsplit(")", 1)[1].split()[19]


def _runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unchanged_for(path: Path) -> float:
    newest = max((found.st_mtime for found in _stats(path, itself=True)), default=time.time())
    return time.time() - newest


def _size(path: Path) -> int:
    return sum(found.st_size for found in _stats(path) if stat.S_ISREG(found.st_mode))


def _stats(path: Path, itself: bool = False) -> list[os.stat_result]:
    found = []
    for child in ([path] if itself else []) + list(path.rglob("*")):
        try:
            found.append(child.lstat())
        except OSError:
            pass
    return found
