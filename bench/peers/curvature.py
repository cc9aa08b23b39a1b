"""Loss-Hessian curvature rows: ntklab against curvlinops, PyHessian and hessian-eigenthings.

The loss L(w) = (1/n) Σ_i ℓ(f(w; x_i), y_i) of an ntklab network (mlp 32-64²-10 tanh, n = 128;
cnn 1×8×8 → 2×conv 8 tanh → GAP → 10, n = 64), with ℓ = ½‖f − y‖² (mse, one-hot float
targets) or softmax cross-entropy (integer labels). Every peer gets the same torch module and
tensors, with torch's mean losses: nn.CrossEntropyLoss() is L itself, nn.MSELoss() is
(1/(nO)) Σ (f − y)², so the peers' mse Hessian is (2/O)·∇²L (the `scale` below).

Three tasks per (network, loss), float32, each call starting from the module (operators built
inside the timed call):

    top-k     the K = 4 eigenvalues of largest |λ|, relative tolerance 1e-3: ntklab Lanczos stops
              when each Ritz value's residual bound is ≤ 1e-3·|θ|; scipy eigsh(tol=1e-3) on
              curvlinops' operator; PyHessian's power iteration with deflation (tol=1e-3 on
              consecutive estimates); hessian-eigenthings' Lanczos, which runs a fixed number of
              steps: it gets the steps ntklab needed (its best case)
    trace     Hutchinson with 32 Rademacher probes (PyHessian's early stop disabled)
    SLQ       4 probes × 16 Lanczos steps and a density on 1024 points (curvlinops is given the
              spectrum's bounds from ntklab's nodes instead of finding them by eigsh)

Agreement, float64: ‖H_peer V / scale − H V‖ / ‖H V‖ for three Gaussian vectors V, and for
top-k the largest relative difference of the K eigenvalues (float64 runs of each).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bench.peers.harness import interleaved, ratio_cell, seconds_cell
from ntklab.api_schemas.spec import model_spec
from ntklab.engine.curvature.lanczos import lanczos_many
from ntklab.engine.curvature.operators import loss_hessian_operator
from ntklab.engine.curvature.spectral_estimators import stochastic_lanczos_quadrature
from ntklab.engine.nets.network import build_network, trainable_parameters

TOP_K, TOLERANCE, CAP = 4, 1e-3, 100
TRACE_PROBES = 32
SLQ_PROBES, SLQ_STEPS, GRID = 4, 16, 1024
PEERS = ("curvlinops", "PyHessian", "hessian-eigenthings")
NETWORKS = {
    "mlp 32-64²-10 tanh, n=128": (dict(hidden=[64, 64], activation="tanh", output_dim=10), (32,), 128),
    "cnn 2×conv8 tanh GAP O=10, n=64": (
        dict(kind="cnn", hidden=[8, 8], activation="tanh", output_dim=10),
        (1, 8, 8),
        64,
    ),
}
LOSSES = ("mse", "cross_entropy")


@dataclass
class Problem:
    """The network, its data x [n, ...] and targets y (one-hot [n, O] for mse, labels [n] for cross-entropy),
    the torch criterion the peers use, and scale: peers' Hessian = scale · ntklab's ∇²L."""

    net: nn.Module
    x: Tensor
    y: Tensor
    loss: str
    criterion: nn.Module
    scale: float

    @property
    def params(self) -> list[Tensor]:
        return list(trainable_parameters(self.net).values())


def problem(network: str, loss: str, dtype: torch.dtype) -> Problem:
    fields, shape, n = NETWORKS[network]
    net = build_network(model_spec(**fields), shape, seed=0, dtype=dtype)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(n, *shape, generator=generator, dtype=dtype)
    labels = torch.randint(0, fields["output_dim"], (n,), generator=generator)
    if loss == "mse":
        y = nn.functional.one_hot(labels, fields["output_dim"]).to(dtype)
        return Problem(net, x, y, loss, nn.MSELoss(), 2 / fields["output_dim"])
    return Problem(net, x, labels, loss, nn.CrossEntropyLoss(), 1.0)


# --------------------------------------------------------------------------- ntklab


def ntklab_top_k(pb: Problem) -> tuple[list[float], int]:
    """Top-k eigenvalues of ∇²L by |λ| and the Lanczos steps taken (certified at TOLERANCE)."""
    operator = loss_hessian_operator(pb.net, pb.x, pb.y, pb.loss)
    [ritz] = lanczos_many(
        operator,
        steps=CAP,
        top_k=TOP_K,
        tolerance=TOLERANCE,
        generator=torch.Generator().manual_seed(0),
    )
    return ritz.values, ritz.matvecs


def ntklab_trace(pb: Problem) -> float:
    operator = loss_hessian_operator(pb.net, pb.x, pb.y, pb.loss)
    quadrature = stochastic_lanczos_quadrature(
        operator,
        probes=TRACE_PROBES,
        steps=1,
        batch=TRACE_PROBES,
        generator=torch.Generator().manual_seed(0),
    )
    return quadrature.trace()


def ntklab_slq(pb: Problem):
    operator = loss_hessian_operator(pb.net, pb.x, pb.y, pb.loss)
    quadrature = stochastic_lanczos_quadrature(
        operator,
        probes=SLQ_PROBES,
        steps=SLQ_STEPS,
        batch=SLQ_PROBES,
        generator=torch.Generator().manual_seed(0),
    )
    quadrature.density(GRID, 0.01)
    return quadrature


# --------------------------------------------------------------------------- peers


def curvlinops_operator(pb: Problem):
    from curvlinops import HessianLinearOperator

    return HessianLinearOperator(pb.net, pb.criterion, pb.params, [(pb.x, pb.y)], check_deterministic=False)


def curvlinops_top_k(pb: Problem) -> list[float]:
    from scipy.sparse.linalg import eigsh

    values = eigsh(curvlinops_operator(pb).to_scipy(), k=TOP_K, which="LM", tol=TOLERANCE, return_eigenvectors=False)
    return sorted(values.tolist(), key=abs, reverse=True)


def curvlinops_trace(pb: Problem) -> float:
    from curvlinops import hutchinson_trace

    return float(hutchinson_trace(curvlinops_operator(pb), TRACE_PROBES))


def curvlinops_slq(pb: Problem, bounds: tuple[float, float]):
    from curvlinops import lanczos_approximate_spectrum

    return lanczos_approximate_spectrum(
        curvlinops_operator(pb), SLQ_STEPS, num_points=GRID, num_repeats=SLQ_PROBES, boundaries=bounds
    )


def pyhessian_operator(pb: Problem):
    """PyHessian's hessian object; it accumulates the gradient into .grad (create_graph), so .grad is cleared first."""
    from pyhessian import hessian

    pb.net.zero_grad(set_to_none=True)
    return hessian(pb.net, pb.criterion, data=(pb.x, pb.y), cuda=False)


def pyhessian_top_k(pb: Problem) -> list[float]:
    with default_dtype(pb.x.dtype):
        values, _ = pyhessian_operator(pb).eigenvalues(maxIter=CAP, tol=TOLERANCE, top_n=TOP_K)
    return values


def pyhessian_trace(pb: Problem) -> float:
    with default_dtype(pb.x.dtype):
        samples = pyhessian_operator(pb).trace(maxIter=TRACE_PROBES, tol=-math.inf)
    return sum(samples) / len(samples)


def pyhessian_slq(pb: Problem):
    with default_dtype(pb.x.dtype), legacy_torch_eig():
        return pyhessian_operator(pb).density(iter=SLQ_STEPS, n_v=SLQ_PROBES)


def eigenthings_operator(pb: Problem):
    from hessian_eigenthings import HessianOperator, supervised_loss

    return HessianOperator(pb.net, [(pb.x, pb.y)], supervised_loss(pb.criterion))


def eigenthings_top_k(pb: Problem, steps: int) -> list[float]:
    from hessian_eigenthings import lanczos

    result = lanczos(eigenthings_operator(pb), k=TOP_K, max_iter=steps, tol=TOLERANCE, seed=0)
    return result.eigenvalues.tolist()


def eigenthings_trace(pb: Problem) -> float:
    from hessian_eigenthings import hutchinson

    return hutchinson(eigenthings_operator(pb), num_samples=TRACE_PROBES, seed=0).estimate


def eigenthings_slq(pb: Problem):
    from hessian_eigenthings import spectral_density

    return spectral_density(
        eigenthings_operator(pb), num_runs=SLQ_PROBES, lanczos_steps=SLQ_STEPS, num_grid_points=GRID, seed=0
    )


@contextmanager
def default_dtype(dtype: torch.dtype):
    """PyHessian draws its vectors with torch.randn(shape): in the default dtype, which must be the model's."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@contextmanager
def legacy_torch_eig():
    """PyHessian 0.1's density calls torch.eig(T, eigenvectors=True), removed in torch 2: the same
    (eigenvalues as [k, 2] real/imaginary columns, eigenvectors) from torch.linalg.eigh of the symmetric T."""

    def eig(T: Tensor, eigenvectors: bool = False):
        values, vectors = torch.linalg.eigh(T)
        return torch.stack([values, torch.zeros_like(values)], dim=1), vectors

    had = hasattr(torch, "eig")
    previous = getattr(torch, "eig", None)
    torch.eig = eig
    try:
        yield
    finally:
        if had:
            torch.eig = previous
        else:
            del torch.eig


# --------------------------------------------------------------------------- agreement (float64)


def peer_matvecs(pb: Problem) -> dict[str, Callable[[Tensor], Tensor]]:
    """peer -> v [p] ↦ its Hessian-vector product divided by `scale` (so: ∇²L v)."""
    from pyhessian.utils import hessian_vector_product

    curv, eig = curvlinops_operator(pb), eigenthings_operator(pb)
    with default_dtype(pb.x.dtype):
        pyh = pyhessian_operator(pb)

    def pyhessian(v: Tensor) -> Tensor:
        pieces = list(torch.split(v, [p.numel() for p in pyh.params]))
        hv = hessian_vector_product(pyh.gradsH, pyh.params, [t.reshape(p.shape) for t, p in zip(pieces, pyh.params)])
        return torch.cat([h.reshape(-1) for h in hv]).detach()

    return {
        "curvlinops": lambda v: (curv @ v) / pb.scale,
        "PyHessian": lambda v: pyhessian(v) / pb.scale,
        "hessian-eigenthings": lambda v: eig.matvec(v) / pb.scale,
    }


def hvp_agreement(pb: Problem) -> dict[str, float]:
    """peer -> max over three Gaussian v of ‖H_peer v − H v‖ / ‖H v‖, float64."""
    operator = loss_hessian_operator(pb.net, pb.x, pb.y, pb.loss)
    vectors = torch.randn(3, operator.dim, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    ours = operator.apply(vectors)
    agreement = {}
    for name, matvec in peer_matvecs(pb).items():
        theirs = torch.stack([matvec(v) for v in vectors])
        agreement[name] = float(torch.max(torch.linalg.norm(theirs - ours, dim=1) / torch.linalg.norm(ours, dim=1)))
    pb.net.zero_grad(set_to_none=True)
    return agreement


# --------------------------------------------------------------------------- the table


def curvature_rows(repeats: int, print_row: Callable[..., None]) -> None:
    """One row per (network, loss, task): ntklab's median, each peer's and peer/ntklab, and the float64 agreement."""
    for network in NETWORKS:
        for loss in LOSSES:
            pb = problem(network, loss, torch.float32)
            reference = problem(network, loss, torch.float64)
            hvp = hvp_agreement(reference)
            _, steps = ntklab_top_k(pb)
            bounds = _slq_bounds(ntklab_slq(pb))
            tasks = {
                f"top-{TOP_K} eigenvalues (tol {TOLERANCE:g})": {
                    "ntklab": lambda: ntklab_top_k(pb)[0],
                    "curvlinops": lambda: curvlinops_top_k(pb),
                    "PyHessian": lambda: pyhessian_top_k(pb),
                    "hessian-eigenthings": lambda: eigenthings_top_k(pb, steps),
                },
                f"Hutchinson trace, {TRACE_PROBES} probes": {
                    "ntklab": lambda: ntklab_trace(pb),
                    "curvlinops": lambda: curvlinops_trace(pb),
                    "PyHessian": lambda: pyhessian_trace(pb),
                    "hessian-eigenthings": lambda: eigenthings_trace(pb),
                },
                f"SLQ {SLQ_PROBES}×{SLQ_STEPS}": {
                    "ntklab": lambda: ntklab_slq(pb),
                    "curvlinops": lambda: curvlinops_slq(pb, bounds),
                    "PyHessian": lambda: pyhessian_slq(pb),
                    "hessian-eigenthings": lambda: eigenthings_slq(pb),
                },
            }
            for task, calls in tasks.items():
                timings = interleaved(calls, repeats)
                pb.net.zero_grad(set_to_none=True)
                agreement = _agreement_cell(hvp, reference, steps if task.startswith("top") else None)
                cells = [seconds_cell(timings["ntklab"])]
                for peer in PEERS:
                    cells += [seconds_cell(timings[peer]), ratio_cell(timings[peer], timings["ntklab"])]
                fastest = min((t.median for name, t in timings.items() if name != "ntklab" and t.median), default=None)
                verdict = (
                    "–"
                    if fastest is None or timings["ntklab"].median is None
                    else (f"{timings['ntklab'].median / fastest:.2f}×")
                )
                print_row(f"{network}, {loss}", task, *cells, verdict, agreement)


def _slq_bounds(quadrature) -> tuple[float, float]:
    nodes = [t for run in quadrature.nodes for t in run]
    return min(nodes), max(nodes)


def _agreement_cell(hvp: dict[str, float], reference: Problem, steps: int | None) -> str:
    cell = "HVP " + ", ".join(f"{hvp[peer]:.0e}" for peer in PEERS)
    if steps is None:
        return cell
    ours, _ = ntklab_top_k(reference)
    theirs = [
        [v / reference.scale for v in values]
        for values in (curvlinops_top_k(reference), pyhessian_top_k(reference), eigenthings_top_k(reference, steps))
    ]
    reference.net.zero_grad(set_to_none=True)
    worst = [max(abs(a - b) / abs(b) for a, b in zip(values, ours)) for values in theirs]
    return cell + "; top-k " + ", ".join(f"{w:.0e}" for w in worst)


CURVATURE_COLUMNS = [
    "work",
    "task",
    "ntklab (s)",
    "curvlinops (s)",
    "× ntklab",
    "PyHessian (s)",
    "× ntklab",
    "hessian-eigenthings (s)",
    "× ntklab",
    "ntklab / fastest peer",
    "float64 agreement (curvlinops, PyHessian, eigenthings)",
]
