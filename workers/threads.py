"""How many torch intra-op threads a worker's pool process runs: the cores the worker owns.

    owned_cores()                  CPUs this process may run on: its affinity mask, capped by a cgroup v2
                                   CPU quota (/sys/fs/cgroup/cpu.max: docker's --cpus, compose's cpus)
    worker_threads(setting)        the setting when > 0, else OMP_NUM_THREADS when set, else owned_cores()
    cores_per_worker(workers)      max(1, owned_cores() // workers): each worker of `ntklab up --workers N`

Nothing here imports torch: the worker's parent process resolves the number (workers/main.py)
and its pool process applies it after importing torch (workers/tasks.py).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def owned_cores() -> int:
    """The CPUs this process may run on, capped by its cgroup's CPU quota rounded up (at least 1)."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()[:2]
    except (OSError, ValueError):
        return cores
    if quota == "max":
        return cores
    return max(1, min(cores, math.ceil(int(quota) / int(period))))


def worker_threads(setting: int) -> int:
    """Threads for one worker: `setting` (NTKLAB_WORKER_THREADS) when > 0, else OMP_NUM_THREADS, else owned_cores()."""
    if setting > 0:
        return setting
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return int(omp) if omp.isdigit() and int(omp) > 0 else owned_cores()


def cores_per_worker(workers: int) -> int:
    """The cores each of `workers` worker processes on this machine owns: max(1, owned_cores() // workers)."""
    return max(1, owned_cores() // workers)
