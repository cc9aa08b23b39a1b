"""A job's estimate as its row stores it (jobs.estimate, migration 0015): planner/estimate.py's Estimate, term by term.

The estimate is computed once, when the job is submitted, at that deployment's rates (service/submission.py);
GET /v1/jobs/{id} (service/estimates.py) and the worker's memory check (workers/tasks.py) read it back. Document:

    {"memory_bytes": int, "flops": float, "memory": [[name, bytes, what], …], "work": [[name, FLOPs, what], …],
     "ops": [[name, operations, what], …], "rates": {"flops_per_s": float, "seconds_per_op": float}}

so that `stored(document(e)) == e`: every term keeps the words that explain it, and the time terms are
recomputed from FLOPs and operations at the stored rates (arithmetic, no planning). NULL: a job stored before
0015, or one whose model cannot be planned.
"""

from __future__ import annotations

from ntklab.planner.estimate import Estimate, Term, TimeRates


def estimate_document(estimate: Estimate | None) -> dict | None:
    """What jobs.estimate stores for `estimate` (module docstring); None for none."""
    if estimate is None:
        return None
    return {
        "memory_bytes": estimate.memory_bytes,
        "flops": estimate.flops,
        **{
            part: [[term.name, term.value, term.what] for term in getattr(estimate, part)]
            for part in ("memory", "work", "ops")
        },
        "rates": {"flops_per_s": estimate.rates.flops_per_s, "seconds_per_op": estimate.rates.seconds_per_op},
    }


def stored_estimate(document: dict | None) -> Estimate | None:
    """The Estimate that `estimate_document` stored; None for a row without one."""
    if document is None:
        return None
    terms = {
        part: tuple(Term(name, value, what) for name, value, what in document[part])
        for part in ("memory", "work", "ops")
    }
    return Estimate(
        memory_bytes=document["memory_bytes"], flops=document["flops"], rates=TimeRates(**document["rates"]), **terms
    )
