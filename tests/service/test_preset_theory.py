"""The theory's slopes: stated once on each preset (service/presets.py), listed by GET /v1/presets, carried by a
preset sweep's fits as theory_slope, and drawn by the one figure the service and the SDK share."""

from __future__ import annotations

import io

import pytest

from ntklab.analysis.labels import group_label
from ntklab.analysis.sweep_table import get_path
from ntklab.resources.sweeps import Sweep
from ntklab.service.grid import expand_grid
from ntklab.service.presets import PRESETS
from tests.worker_writes import sweep_succeeded

THEORY_SLOPES = {"linear head": -0.5, "softmax head": 0.0, "swish head": 0.0}  # the paper's Figure 1 (left)


@pytest.mark.parametrize("name", sorted(name for name, preset in PRESETS.items() if preset.theory))
def test_every_theory_slope_names_a_fit_of_its_preset_and_a_group_that_fit_makes(name):
    sweep = PRESETS[name].sweep("smoke")
    specs = [point.spec.model_dump(mode="json") for point in expand_grid(sweep.base, sweep.grid)]
    for y, slopes in PRESETS[name].theory.items():
        fits = [fit for fit in sweep.fits if fit.y == y]
        assert fits, f"{name}: theory for {y}, a scalar none of its fits has"
        for fit in fits:
            labels = {group_label({path: get_path(spec, path) for path in fit.group_by}) for spec in specs}
            assert set(slopes) <= labels, f"{name}: theory groups {set(slopes) - labels} are not groups of {y}"
            assert fit.theory == slopes


def test_the_presets_list_shows_each_presets_theory(client):
    listed = {preset["name"]: preset for preset in client.get("/v1/presets").json()["data"]}
    assert {name: preset["theory"] for name, preset in listed.items()} == {
        name: preset.theory for name, preset in PRESETS.items()
    }
    assert listed["fig1-width"]["theory"] == {"delta_k_max": THEORY_SLOPES}
    assert listed["lazy-is-not-small"]["theory"] == {
        "weight_change_l2": {"all": 0.0},
        "weight_change_linf": {"all": -0.5},
    }


def _finish_fig1(db, sweep_id: str) -> None:
    """What workers would write: ΔK = width^-1 with a linear head, 0.9 with the others."""

    def summary(spec: dict) -> dict:
        width, head = spec["model"]["hidden"][0], spec["model"]["output_activation"]
        return {"delta_k_max": width**-1.0 if head == "identity" else 0.9}

    sweep_succeeded(db, sweep_id, summary)


def test_a_preset_sweeps_fits_carry_their_groups_theory_slope_and_labels(client, db):
    created = client.post("/v1/presets/fig1-width", json={"scale": "smoke"}).json()
    _finish_fig1(db, created["id"])
    fits = client.get(f"/v1/sweeps/{created['id']}").json()["fits"]
    assert {fit["group_label"]: fit["theory_slope"] for fit in fits} == THEORY_SLOPES
    assert {(fit["x_label"], fit["y_label"]) for fit in fits} == {("width m", "ΔK")}
    linear = next(fit for fit in fits if fit["group_label"] == "linear head")
    assert linear["slope"] == pytest.approx(-1.0) and linear["verdict"].startswith("linear head: delta_k_max ∝ x^-1.00")


def test_a_sweep_without_theory_has_none(client, db):
    spec = {
        "base": {"model": {"hidden": [10]}, "training": {"max_steps": 5}},
        "grid": {"model.hidden.0": [10, 100], "model.output_activation": ["identity", "swish"]},
        "fits": [{"y": "delta_k_max", "x": "model.hidden.0", "group_by": ["model.output_activation"]}],
    }
    created = client.post("/v1/sweeps", json=spec).json()
    _finish_fig1(db, created["id"])
    assert [fit["theory_slope"] for fit in client.get(f"/v1/sweeps/{created['id']}").json()["fits"]] == [None, None]


def test_a_theory_slope_out_of_range_is_a_422_naming_the_field(client):
    spec = {
        "base": {},
        "grid": {"model.hidden.0": [10]},
        "fits": [{"y": "delta_k_max", "x": "model.hidden.0", "theory": {"all": 1e9}}],
    }
    response = client.post("/v1/sweeps", json=spec)
    assert response.status_code == 422
    assert any("theory" in error["field"] for error in response.json()["errors"]), response.text


def test_the_services_plot_and_the_sdks_figure_are_the_same_drawing(client, db):
    """Same pixels: GET /v1/sweeps/{id}/plot and the SDK's sweep.plot() of that sweep, both titled with the preset's
    title in words."""
    created = client.post("/v1/presets/fig1-width", json={"scale": "smoke"}).json()
    _finish_fig1(db, created["id"])
    sweep = client.get(f"/v1/sweeps/{created['id']}").json()
    served = client.get(f"/v1/sweeps/{created['id']}/plot", params={"format": "png"}).content
    figure = Sweep.model_validate(sweep).plot()
    drawn = io.BytesIO()
    figure.savefig(drawn, format="png")
    assert served == drawn.getvalue()
    (axes,) = figure.axes
    assert figure.get_suptitle() == "Figure 1 (left): ΔK vs width, linear vs softmax vs swish head (smoke scale)"
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("width m", "ΔK")
    theory_lines = [line.get_label() for line in axes.lines if line.get_linestyle() == "--"]
    assert theory_lines == [f"{group}: theory slope {slope:+.2f}" for group, slope in THEORY_SLOPES.items()]
