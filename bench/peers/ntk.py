"""Tangent-kernel rows: ntklab (auto and structured) against nngeometry and neural-tangents.

The empirical NTK of the logits, K [n·O, n·O] (row i·O + a), of an ntklab MLP 64-1024³-O, tanh,
standard parameterization (c = 1: the kernel is over the same parameters for every peer; in
the NTK parameterization a torch.nn copy's kernel would differ by c² per layer), on n = 256
Gaussian points, O = 1 and 10. The peers get the same weights: nngeometry's GramMatrix a
torch.nn.Sequential copy (its hooks know torch.nn.Linear only); neural-tangents (structured derivatives, jitted) the raw
weights in stax.Dense(parameterization="ntk") in a subprocess of .venv-jax
(bench/peers/nt_worker.py), one kernel per round on request so that the rounds interleave (its
time includes the pipe's round trip, well under a millisecond). Agreement: max |K_peer − K| / max |K| in float64.

Not ported yet (issue 29's other NTK rows): the CNN (3×conv 32, GAP), the ViT block and the
infinite-width relu CNN; the rows print why.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bench.peers.harness import interleaved, ratio_cell, seconds_cell
from ntklab.api_schemas.spec import ModelSpec
from ntklab.engine.kernels.ntk import tangent_kernel
from ntklab.engine.nets.network import build_network

ROOT = Path(__file__).resolve().parents[2]
JAX_PYTHON = ROOT / ".venv-jax" / "bin" / "python"
D, N = 64, 256
NETWORKS = {f"MLP 64-1024³-{O} tanh, n=256": O for O in (1, 10)}
NOT_PORTED = {
    "CNN 3×conv32 GAP O=10, n=128": "not ported to the peers' layers yet",
    "ViT block O=10, n=64": "not ported (nngeometry has no rule for Linear on [n, T, d] tokens)",
    "infinite-width relu CNN, float64, n=64": "not ported to stax yet",
}
NTK_COLUMNS = [
    "work",
    "ntklab auto (s)",
    "ntklab structured (s)",
    "nngeometry (s)",
    "× auto",
    "neural-tangents (s)",
    "× auto",
    "float64 agreement (structured, nngeometry, neural-tangents vs auto)",
]


def mlp(O: int, dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor]:
    net = build_network(
        ModelSpec(hidden=[1024] * 3, activation="tanh", output_dim=O, parameterization="standard"),
        (D,),
        seed=0,
        dtype=dtype,
    )
    x = torch.randn(N, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)
    return net, x


def dense_layers(net: nn.Module) -> list[nn.Module]:
    return [stage.layer for stage in net.stages] + [net.readout]


def sequential_copy(net: nn.Module) -> nn.Sequential:
    """torch.nn.Linear layers with weights c·W and biases β·b, tanh between them: the same function."""
    modules: list[nn.Module] = []
    layers = dense_layers(net)
    for i, layer in enumerate(layers):
        copy = nn.Linear(layer.in_features, layer.out_features, dtype=layer.weight.dtype)
        with torch.no_grad():
            copy.weight.copy_(layer.weight_multiplier * layer.weight)
            copy.bias.copy_(layer.bias_multiplier * layer.bias)
        modules += [copy] + ([nn.Tanh()] if i < len(layers) - 1 else [])
    return nn.Sequential(*modules)


def nngeometry_kernel(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    from nngeometry.gram import GramMatrix
    from torch.utils.data import DataLoader, TensorDataset

    G = GramMatrix(model, DataLoader(TensorDataset(x), batch_size=len(x)), function=lambda inputs: model(inputs)).data
    O, n = G.shape[:2]
    return G.permute(1, 0, 3, 2).reshape(n * O, n * O)


class NeuralTangents:
    """The nt_worker subprocess on one network's weights; `call()` times one kernel there."""

    def __init__(self, net: nn.Module, x: torch.Tensor, folder: Path) -> None:
        arrays = {"x": x.double().numpy(), "layers": len(dense_layers(net)), "activation": "tanh"}
        for l, layer in enumerate(dense_layers(net)):
            arrays |= {
                f"W{l}": layer.weight.detach().double().numpy(),
                f"b{l}": layer.bias.detach().double().numpy(),
                f"c{l}": layer.weight_multiplier,
                f"beta{l}": layer.bias_multiplier,
            }
        self.folder = folder
        np.savez(folder / "problem.npz", **arrays)
        self.process = subprocess.Popen(
            [str(JAX_PYTHON), str(ROOT / "bench" / "peers" / "nt_worker.py"), str(folder / "problem.npz")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the neural-tangents worker did not start")

    def call(self) -> float:
        self.process.stdin.write("time\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def kernel64(self) -> torch.Tensor:
        path = self.folder / "K.npy"
        self.process.stdin.write(f"kernel64 {path}\n")
        self.process.stdin.flush()
        self.process.stdout.readline()
        return torch.from_numpy(np.load(path))

    def close(self) -> None:
        self.process.stdin.write("quit\n")
        self.process.stdin.flush()
        self.process.wait(timeout=60)


def jax_missing() -> str | None:
    """Why neural-tangents cannot run, or None."""
    if not JAX_PYTHON.exists():
        return "skipped: .venv-jax absent (jax 0.4.23 did not install; `make .venv-jax` says why)"
    return None


def ntk_rows(repeats: int, print_row: Callable[..., None]) -> None:
    skip = jax_missing()
    if skip:
        print(f"neural-tangents {skip}")
    for label, O in NETWORKS.items():
        net, x = mlp(O, torch.float32)
        copy = sequential_copy(net)
        with tempfile.TemporaryDirectory() as folder:
            worker = None if skip else NeuralTangents(net, x, Path(folder))
            calls = {
                "auto": lambda: tangent_kernel(net, x, method="auto", of="logits"),
                "structured": lambda: tangent_kernel(net, x, method="structured", of="logits"),
                "nngeometry": lambda: nngeometry_kernel(copy, x),
            }
            if worker is not None:
                calls["neural-tangents"] = worker.call
            timings = interleaved(calls, repeats)
            agreement = _agreement(O, worker)
            if worker is not None:
                worker.close()
        nt_cells = (
            [seconds_cell(timings["neural-tangents"]), ratio_cell(timings["neural-tangents"], timings["auto"])]
            if worker is not None
            else [skip, "–"]
        )
        print_row(
            label,
            seconds_cell(timings["auto"]),
            seconds_cell(timings["structured"]),
            seconds_cell(timings["nngeometry"]),
            ratio_cell(timings["nngeometry"], timings["auto"]),
            *nt_cells,
            agreement,
        )
    for label, why in NOT_PORTED.items():
        print_row(label, *["–"] * 6, why)


def _agreement(O: int, worker: NeuralTangents | None) -> str:
    net, x = mlp(O, torch.float64)
    K = tangent_kernel(net, x, method="auto", of="logits")
    others = [tangent_kernel(net, x, method="structured", of="logits"), nngeometry_kernel(sequential_copy(net), x)]
    if worker is not None:
        others.append(worker.kernel64())
    scale = float(K.abs().max())
    return ", ".join(f"{float((other - K).abs().max()) / scale:.0e}" for other in others)
