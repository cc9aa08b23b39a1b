"""Where a job's time goes: summary.timings sums to the wall time, and every long phase reports progress."""

from __future__ import annotations

import gc
import time

import pytest

from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.callbacks import Progress
from ntklab.engine.run import run
from ntklab.engine.timings import PhaseClock

PHASES = {"data", "build", "kernel", "hessian", "sensitivity", "training", "linearization", "storage"}


def spec(**overrides) -> JobSpec:
    fields = {
        "seed": 0,
        "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 6, "classes": 2, "probe": {"n": 8}},
        "model": {"hidden": [64], "activation": "tanh", "output_activation": "swish"},
        "training": {"max_steps": 150, "target_loss": None},
        "diagnostics": {"kernel": {"points": 12}, "hessian": {"probe_points": 2, "top_k": 2}},
        "device": "cpu",
    }
    return JobSpec.model_validate(fields | overrides)


class Timeline:
    """Callbacks that keep every progress report with the time it arrived; `stop_when` ends the run early."""

    def __init__(self, stop_when=lambda progress: False):
        self.started = time.perf_counter()
        self.reports: list[tuple[float, Progress]] = []
        self.stop_when = stop_when

    def progress(self, progress: Progress) -> None:
        self.reports.append((time.perf_counter() - self.started, progress))
        if self.stop_when(progress):
            raise Seen(progress)

    def metric(self, name, step, value):
        pass

    def cancelled(self):
        return False


class Seen(Exception):
    """Raised by Timeline to stop a run once the report it waits for has arrived."""


def test_nested_phases_are_charged_to_the_innermost_one_only():
    clock = PhaseClock()
    with clock("outer"):
        time.sleep(0.05)
        with clock("inner"):
            time.sleep(0.1)
        time.sleep(0.05)
    outside = time.perf_counter()
    time.sleep(0.05)
    seconds, elapsed = clock.seconds(), clock.elapsed()
    assert list(seconds) == ["outer", "inner"]
    assert seconds["inner"] >= 0.1 and seconds["outer"] >= 0.1
    assert seconds["outer"] + seconds["inner"] <= outside - clock.started + 1e-6  # nothing charged twice
    assert sum(seconds.values()) <= elapsed - 0.05  # time outside every phase is charged to none


@pytest.fixture(scope="module")
def timed_run():
    """One run with the cyclic garbage collector paused. In a clean-clone CI run 55 ms of a 0.32 s run fell outside
    every phase (timings summed to 0.262 s; alone, 1–3 ms do); a collection in the whole suite's large heap is the
    likely cause (not proven), noise of the test process that the 5 % claim below is not about."""
    callbacks = Timeline()
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        result = run(spec(), callbacks)
        return result, callbacks, time.perf_counter() - started
    finally:
        gc.enable()


def test_timings_name_every_phase_and_sum_to_the_wall_time(timed_run):
    result, _, outside = timed_run
    timings, wall = result.summary["timings"], result.summary["wall_time_s"]
    assert PHASES <= set(timings) and all(seconds >= 0 for seconds in timings.values())
    assert timings["kernel"] > 0 and timings["hessian"] > 0 and timings["training"] > 0
    assert wall <= outside
    assert sum(timings.values()) == pytest.approx(wall, rel=0.05)


def test_progress_names_each_phase_and_counts_hessian_vector_products(timed_run):
    result, callbacks, _ = timed_run
    phases = [progress.phase for _, progress in callbacks.reports]
    assert phases[:3] == ["data", "build", "kernel"] and phases[-1] == "storage"
    assert {"hessian", "sensitivity", "train"} <= set(phases)
    hessian = [progress for _, progress in callbacks.reports if progress.phase == "hessian" and progress.step > 0]
    assert hessian, "the Hessian never reported the products it had done"
    assert all(p.eta_s is not None and p.eta_s >= 0 and p.step <= p.total for p in hessian)
    first_at_init = phases.index("train")
    done_at_init = [p.step for _, p in callbacks.reports[:first_at_init] if p.phase == "hessian"]
    assert done_at_init == sorted(done_at_init)
    assert done_at_init[-1] == result_hvps(result, "init")


def result_hvps(result, when: str) -> int:
    import json

    return json.loads(result.artifacts["hessian.json"].data)[when]["hvps"]


def test_a_4096_by_4096_network_reports_hessian_progress_after_its_first_product():
    """On 16.8 M weights one Hessian-vector product takes seconds: the phase reports its start, then moves at the
    first product with an eta (a count of work, not seconds, so that a loaded machine cannot fail it; this
    test's old 5 s limit was met in 3.6–4.9 s at load 4 and missed at 7.4 s under a benchmark)."""
    wide = spec(
        model={"hidden": [4096, 4096], "activation": "tanh", "output_activation": "identity"},
        training={"max_steps": 10, "target_loss": None},
        diagnostics={"kernel": {"points": 4}, "hessian": {"probe_points": 2}},
    )
    callbacks = Timeline(stop_when=lambda p: p.phase == "hessian" and p.step > 0)
    with pytest.raises(Seen) as seen:
        run(wide, callbacks)
    first = seen.value.args[0]
    assert first.step == 1 and first.total >= first.step and first.eta_s is not None, first
    phases = [p for _, p in callbacks.reports]
    assert [p.phase for p in phases] == ["data", "build", "kernel", "hessian", "hessian"], phases
    assert phases[3].step == 0
