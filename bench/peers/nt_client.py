"""The neural-tangents worker (bench/peers/nt_worker.py) as a subprocess of .venv-jax, driven over a pipe.

    worker = NeuralTangents(problem, folder, threads)   problem: nt_export.py's arrays
    worker.call()       one timed kernel there (its seconds come back, the pipe's round trip, well
                        under a millisecond, included in the caller's wall time)
    worker.kernel64()   K [n·O, n·O] in float64 (row i·O + a)
    worker.close()

One kernel per request, so that its rounds interleave with ntklab's and nngeometry's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
JAX_PYTHON = ROOT / ".venv-jax" / "bin" / "python"


def jax_missing() -> str | None:
    """Why neural-tangents cannot run, or None."""
    if not JAX_PYTHON.exists():
        return "skipped: .venv-jax absent (jax 0.4.23 did not install; `make .venv-jax` says why)"
    return None


class NeuralTangents:
    """The nt_worker subprocess on one saved problem."""

    def __init__(self, problem: dict, folder: Path, threads: int) -> None:
        self.folder = folder
        np.savez(folder / "problem.npz", **problem)
        self.process = subprocess.Popen(
            [str(JAX_PYTHON), "-m", "bench.peers.nt_worker", str(folder / "problem.npz"), "--threads", str(threads)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the neural-tangents worker did not start")

    def call(self) -> float:
        return float(self._ask("time"))

    def kernel64(self) -> torch.Tensor:
        path = self.folder / "K.npy"
        self._ask(f"kernel64 {path}")
        return torch.from_numpy(np.load(path))

    def close(self) -> None:
        self.process.stdin.write("quit\n")
        self.process.stdin.flush()
        self.process.wait(timeout=60)

    def _ask(self, command: str) -> str:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline()
