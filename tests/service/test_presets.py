import pytest

from ntklab.config.settings import Settings
from ntklab.service.caps import check_spec_caps
from ntklab.service.grid import expand_grid, grid_size
from ntklab.service.presets import PRESETS, SCALES


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("scale", SCALES)
def test_every_preset_expands_to_valid_jobs(name, scale):
    sweep = PRESETS[name].sweep(scale)
    points = expand_grid(sweep.base, sweep.grid)
    assert len(points) == grid_size(sweep.grid) > 0
    assert sweep.tags[-1] == name
    defaults = Settings()
    assert all(check_spec_caps(point.spec, defaults) > 0 for point in points), "every job within the default caps"


def test_scales_grow():
    for preset in PRESETS.values():
        sizes = [grid_size(preset.sweep(scale).grid) for scale in SCALES]
        assert sizes == sorted(sizes)


def test_table1_families_are_linked_and_grouped_by_name():
    points = expand_grid(PRESETS["table1-hessian"].sweep("smoke").base, PRESETS["table1-hessian"].sweep("smoke").grid)
    bottleneck = [p.spec for p in points if p.spec.name == "bottleneck"]
    assert bottleneck and all(s.model.hidden[0] == s.model.hidden[2] and s.model.hidden[1] == 3 for s in bottleneck)
    assert {p.spec.model.output_activation for p in points if p.spec.name == "swish head"} == {"swish"}


def test_a_paper_scale_preset_is_refused_where_the_deployment_cannot_run_its_largest_point(client_with):
    """Paper scale is not refused for want of a GPU: each point is held to the deployment's caps. fig1-width's
    largest paper point (m = 10⁶, 5000 steps) is estimated at ~24 min on the reference core (its next, m = 10⁵, at
    ~2.5 min); a deployment capped at 10 min a job refuses the preset at submission, naming that point and the
    cap, and stores nothing."""
    strict = client_with(max_job_seconds=600)
    refused = strict.post("/v1/presets/fig1-width", json={"scale": "paper"})
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert "1000000" in problem["detail"] and "max_job_seconds" in problem["detail"]
    assert strict.get("/v1/sweeps").json()["data"] == []
    assert strict.get("/v1/jobs").json()["data"] == []
    assert strict.post("/v1/presets/fig1-width", json={"scale": "cpu"}).status_code == 202


def test_a_paper_scale_preset_within_the_default_caps_is_accepted(client_with):
    accepted = client_with().post("/v1/presets/fig1-time", json={"scale": "paper"})
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["total"] == grid_size(PRESETS["fig1-time"].sweep("paper").grid)
