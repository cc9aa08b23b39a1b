"""The infinite-width row: ntklab's limit kernel Θ∞ of a relu CNN against neural-tangents' stax kernel_fn.

    relu CNN 3×conv (3×3, same padding), global average pooling, dense readout; n = 64 Gaussian
    inputs read as 1×8×8 images; float64 on both sides (the issue's row)

ntklab: engine/limits/infinite_width.limit_kernels on bench_infinite_width.PEER_MODEL (its NTK
parameterization, W ~ N(0, 1), c = 1/√fan_in, β = 1: stax's W_std = c·√fan_in·std(W) = 1 and
b_std = β = 1 for every layer; the width of the spec does not enter the limit). neural-tangents:
bench/peers_nt_infinite_cnn.py --serve in .venv-jax, jitted, one call per request after its
warm-up, so the rounds interleave (harness.py; its time includes the pipe's round trip). There is
no nngeometry column (it has no infinite-width kernels). Agreement: max |ΔΘ| / max |Θ∞|.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from bench.bench_infinite_width import PEER_MODEL
from bench.peers.harness import interleaved, ratio_cell, seconds_cell
from bench.peers.nt_client import JAX_PYTHON, ROOT
from ntklab.engine.limits.infinite_width import limit_kernels

LABEL = "infinite-width relu CNN 3×conv GAP 8×8, n=64, float64"


def infinite_cnn_row(repeats: int, print_row: Callable[..., None], threads: int, skip: str | None) -> None:
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    calls = {"ntklab": lambda: limit_kernels(PEER_MODEL, x).ntk}
    with tempfile.TemporaryDirectory() as folder:
        peer = None if skip else _start(x, Path(folder), threads)
        if peer is not None:
            calls["neural-tangents"] = lambda: _ask(peer)
        timings = interleaved(calls, repeats)
        if peer is not None:
            peer.stdin.close()
            peer.wait(timeout=120)
            theirs = torch.from_numpy(np.load(Path(folder) / "theta.npy"))
    ours = timings["ntklab"].result
    nt_cells = (
        [seconds_cell(timings["neural-tangents"]), ratio_cell(timings["neural-tangents"], timings["ntklab"])]
        if peer is not None
        else [skip, "–"]
    )
    agreement = "–" if peer is None else f"–, –, {float((theirs - ours).abs().max() / ours.abs().max()):.0e}"
    print_row(
        LABEL,
        f"{seconds_cell(timings['ntklab'])} (Θ∞)",
        "–",
        "– (no infinite-width kernels)",
        "–",
        *nt_cells,
        agreement,
    )


def _start(x: torch.Tensor, folder: Path, threads: int) -> subprocess.Popen:
    np.save(folder / "x.npy", x.numpy())
    script = ROOT / "bench" / "peers_nt_infinite_cnn.py"
    command = [str(JAX_PYTHON), str(script), "--inputs", str(folder / "x.npy"), "--out", str(folder / "theta.npy")]
    peer = subprocess.Popen(
        [*command, "--threads", str(threads), "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    _reply(peer)  # {"warmup_seconds": …} after its jit warm-up
    return peer


def _ask(peer: subprocess.Popen) -> float:
    peer.stdin.write("run\n")
    peer.stdin.flush()
    return _reply(peer)["seconds"]


def _reply(peer: subprocess.Popen) -> dict:
    """The peer's next JSON line."""
    for line in peer.stdout:
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("the neural-tangents infinite-width script exited")
