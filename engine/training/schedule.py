"""The training steps at which metrics are recorded.

Two schedules, both fixed before training starts; the run always records the final
step it actually reaches on top of them (converged, diverged or stopped early).

- diagnostics (kernel, weight change, linearization error, optional Hessian):
  `log` = step 0 and `points` log-spaced steps in [1, max_steps] rounded and deduplicated (default
  min(50, max(8, ⌈max_steps / 50⌉)), KernelDiagnostics.log_points);
  `every` N = steps 0, N, 2N, … ≤ max_steps.
- loss: every step while max_steps + 1 ≤ `limit`; otherwise the first limit/2 steps
  densely and limit/2 log-spaced steps up to max_steps — at most `limit` points,
  dense where the loss moves fastest and even on a log time axis.
"""

from __future__ import annotations

import numpy as np

from ntklab.api_schemas.spec import KernelDiagnostics

LOSS_POINTS = 1000


def diagnostic_steps(kernel: KernelDiagnostics, max_steps: int) -> frozenset[int]:
    """Steps at which the kernel and the other path diagnostics are measured."""
    if kernel.schedule == "every":
        return frozenset(range(0, max_steps + 1, kernel.every))
    return frozenset({0}) | log_spaced(1, max_steps, kernel.log_points(max_steps))


def loss_steps(max_steps: int, limit: int = LOSS_POINTS) -> frozenset[int]:
    """Steps at which the training loss is recorded: at most `limit` of them."""
    if max_steps + 1 <= limit:
        return frozenset(range(max_steps + 1))
    dense = limit // 2
    return frozenset(range(dense)) | log_spaced(dense, max_steps, limit - dense)


def log_spaced(first: int, last: int, points: int) -> frozenset[int]:
    """`points` integers geometrically spaced over [first, last] (first ≥ 1), deduplicated."""
    if last < first:
        return frozenset()
    return frozenset(int(s) for s in np.unique(np.rint(np.geomspace(first, last, points))))
