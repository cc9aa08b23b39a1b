"""Loaded at start-up by every Python process whose PYTHONPATH begins with this folder (tests/integration/
test_estimate_once.py puts it there for a live API and worker): ntklab.planner.estimate.estimate_job, wrapped to
append "<pid> <spec name>" to the file NTKLAB_TEST_ESTIMATE_LOG for every call, before any module imports it."""

import os

if os.environ.get("NTKLAB_TEST_ESTIMATE_LOG"):
    import functools

    import ntklab.planner.estimate

    _estimate_job = ntklab.planner.estimate.estimate_job

    @functools.wraps(_estimate_job)
    def _counted(spec, *args, **kwargs):
        with open(os.environ["NTKLAB_TEST_ESTIMATE_LOG"], "a") as log:
            log.write(f"{os.getpid()} {spec.name}\n")
        return _estimate_job(spec, *args, **kwargs)

    ntklab.planner.estimate.estimate_job = _counted
