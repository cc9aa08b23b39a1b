"""Every scalar the engine reports is a field of JobSummary, with a unit and a definition, and every
series it records is one api_schemas/series.py lists.

The engine runs the bench's jobs (bench/bench_job_phases.py), the first point of every preset's
smoke sweep (service/presets.py) and one job with every optional diagnostic on, each cut to two
training steps and a few points and units (the keys depend on the diagnostics and the head, not on
the sizes), and
every key of every summary must be a declared field (none may arrive only as an extra), every series
a declared series.
"""

from __future__ import annotations

import copy
import re

import pytest

from bench.bench_job_phases import JOBS
from ntklab.api_schemas.series import SERIES
from ntklab.api_schemas.spec import JobSpec
from ntklab.api_schemas.summary import JobSummary
from ntklab.engine.run import run
from ntklab.service.grid import expand_grid
from ntklab.service.presets import PRESETS

pytestmark = pytest.mark.slow

STEPS = 2
SMALL = 8
EVERYTHING = {
    "seed": 0,
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 3, "classes": 2},
    "model": {"hidden": [6], "activation": "tanh", "output_activation": "swish"},
    "training": {"max_steps": STEPS},
    "diagnostics": {
        "hessian": {"at": ["init", "schedule", "final"], "probe_points": 2},
        "hessian_spectrum": {"probes": 2, "lanczos_steps": 4},
        "loss_hessian": {"iterations": 4},
        "infinite_width": {},
    },
}


def short(document: dict) -> JobSpec:
    """The spec cut down: STEPS training steps, at most SMALL points, probe points and units per layer."""
    document = copy.deepcopy(document)
    document.setdefault("training", {})["max_steps"] = STEPS
    data, model = document["data"], document["model"]
    data["n_train"] = min(data.get("n_train", SMALL), SMALL)
    data["probe"] = {**data.get("probe", {}), "n": min(data.get("probe", {}).get("n", SMALL), SMALL)}
    model["hidden"] = [min(width, SMALL) for width in model.get("hidden", [SMALL])]
    return JobSpec.model_validate(document)


def preset_specs() -> dict[str, JobSpec]:
    specs = {}
    for name, preset in PRESETS.items():
        sweep = preset.sweep("smoke")
        first = expand_grid(sweep.base, sweep.grid)[0].spec
        specs[f"preset:{name}"] = short(first.model_dump(mode="json", exclude_unset=True))
    return specs


RUNS = {**{f"bench:{name}": document for name, document in JOBS.items()}, "everything": EVERYTHING}


@pytest.mark.parametrize("name", [*RUNS, *PRESETS])
def test_every_summary_key_and_series_is_declared(name):
    spec = preset_specs()[f"preset:{name}"] if name in PRESETS else short(RUNS[name])
    result = run(spec)
    assert set(result.summary) - set(JobSummary.model_fields) == set()
    assert set(result.series) - set(SERIES) == set()


def test_the_everything_run_reports_each_optional_family():
    summary = run(short(EVERYTHING)).summary
    for key in (
        "delta_k_max_logits",
        "hessian_norm_final",
        "hessian_spectrum_trace_init",
        "kernel_inf_distance_init",
        "linearization_error_final_logits",
        "wall_time_s",
        "timings",
    ):
        assert key in summary, key


def test_every_field_states_its_unit_and_definition():
    for name, field in JobSummary.model_fields.items():
        assert re.match(r"^\[[^\]]+\] \S", field.description or ""), name
