"""The one depth limit on nested residuals (ntklab.api_schemas.graph.MAX_NESTING) is a depth the worker can run.

A graph nested MAX_NESTING deep is built and run by the engine, every diagnostic on, inside
a stack of ENGINE_FRAMES frames; the rest of the interpreter's default 1000 is the
worker's own stack (Celery's prefork child and the task). One level deeper is refused by
the spec, naming the field and the limit, before pydantic recurses into the layers.
"""

from __future__ import annotations

import inspect
import sys

import pytest
from pydantic import ValidationError

from ntklab.api_schemas.graph import MAX_NESTING, too_deep
from ntklab.api_schemas.spec import JobSpec
from ntklab.engine.nets.graph import build_graph_network
from ntklab.engine.run import run
from tests.engine.spec_errors import without_model_tag

ENGINE_FRAMES = 700


def nested(depth: int) -> list[dict]:
    layers: list[dict] = [{"type": "dense", "width": 4}, {"type": "activation", "name": "tanh"}]
    for _ in range(depth):
        layers = [{"type": "residual", "layers": [{"type": "dense", "width": 4}, *layers], "scale": 0.5}]
    return layers


def spec(depth: int) -> dict:
    return {
        "model": {"kind": "graph", "layers": nested(depth)},
        "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4, "classes": 2, "probe": {"n": 4}},
        "training": {"max_steps": 2},
        "diagnostics": {
            "kernel": {"method": "structured"},
            "hessian": {"at": ["init"], "iterations": 8},
            "loss_hessian": {"iterations": 8},
            "infinite_width": {},
        },
        "dtype": "float64",
    }


def within_frames(frames: int, call):
    """call() with at most `frames` more Python frames than the caller has; RecursionError beyond."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + frames)
    try:
        return call()
    finally:
        sys.setrecursionlimit(limit)


def test_a_graph_nested_max_nesting_deep_is_built_and_run_by_the_engine():
    job = JobSpec.model_validate(spec(MAX_NESTING))
    net = build_graph_network(job.model, (4,), seed=0)
    assert sum(1 for _ in net.modules()) > MAX_NESTING
    result = within_frames(ENGINE_FRAMES, lambda: run(job))
    assert result.series and result.summary, "the run measured its series and summary"
    print(result.summary)


def test_the_engine_needs_more_frames_per_level_so_the_budget_is_not_vacuous():
    job = JobSpec.model_validate(spec(MAX_NESTING))
    with pytest.raises(RecursionError):
        within_frames(ENGINE_FRAMES // 2, lambda: run(job))


def test_one_level_deeper_is_refused_naming_the_field_and_the_limit():
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate(spec(MAX_NESTING + 1))
    (error,) = refused.value.errors()
    assert without_model_tag(error["loc"]) == ("model", "layers")  # the field as written (the API names it so)
    assert error["ctx"]["le"] == MAX_NESTING
    assert error["msg"].startswith("model.layers.0" + ".layers.1" * MAX_NESTING + " is a residual nested 65 deep")


def test_depth_is_counted_on_every_branch_and_far_beyond_any_recursion_limit():
    deep = nested(MAX_NESTING + 1)
    assert too_deep([{"type": "dense", "width": 1}, *deep]) == "model.layers.1" + ".layers.1" * MAX_NESTING
    assert too_deep(nested(MAX_NESTING)) is None
    assert too_deep(nested(10 * sys.getrecursionlimit())) is not None
