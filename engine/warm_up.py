"""One tiny job through every phase of the default spec, run when a worker process starts.

The first job a process runs pays for what torch does once: functorch's transforms (jvp,
functional_call) and the dispatch modes the kernel capture uses, LAPACK's first eigh, the
autograd engine, the OpenMP thread pool; on a GPU the CUDA context, the cuBLAS and cuSOLVER
handles and the first kernels' loading. `warm_up(device)` pays them before the worker takes a
job, so its first job runs as fast as its second (docs/benchmarks.md, "The first job after
start-up"). The job is a 4-unit MLP on 4 points, two training steps, with the default spec's
diagnostics (kernel, Hessian, layer sensitivity, linearization, weight change, saved kernels
and weights); nothing of it is kept.
"""

from __future__ import annotations

import time

from api_schemas.spec import JobSpec
from engine.run import run

WARM_UP_JOB = {
    "model": {"hidden": [4]},
    "data": {"kind": "gaussian_mixture", "n_train": 4, "input_dim": 2, "probe": {"n": 2}},
    "training": {"max_steps": 2},
}


def warm_up(device: str) -> float:
    """Run WARM_UP_JOB on `device` ("cpu", "cuda:0"); returns the seconds it took."""
    started = time.perf_counter()
    run(JobSpec.model_validate(WARM_UP_JOB), device=device)
    return time.perf_counter() - started
