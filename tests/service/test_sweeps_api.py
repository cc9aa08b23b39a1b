"""Sweeps and presets through the API: expansion, one transaction, derived status, fits, plot, cancel."""

import pytest
from sqlalchemy import select

from ntklab.service.grid import grid_size
from ntklab.service.presets import PRESETS
from ntklab.store.models import Job
from tests.worker_writes import sweep_succeeded, written_by_a_worker

SWEEP = {
    "name": "mini",
    "base": {"model": {"hidden": [10], "activation": "tanh"}, "training": {"max_steps": 5}},
    "grid": {"model.hidden.0": [10, 100, 1000], "model.output_activation": ["identity", "swish"], "seed": [0, 1]},
    "fits": [{"y": "delta_k_max", "x": "model.hidden.0", "group_by": ["model.output_activation"]}],
}


def _finish(db, sweep_id: str, slope_by_head: dict[str, float]) -> None:
    def summary(spec: dict) -> dict:
        width, head, seed = spec["model"]["hidden"][0], spec["model"]["output_activation"], spec["seed"]
        return {"delta_k_max": 3.0 * width ** slope_by_head[head] * (1.05 if seed else 0.95)}

    sweep_succeeded(db, sweep_id, summary)


def test_sweep_makes_one_queued_job_per_grid_point_and_publishes_them(client, app):
    response = client.post("/v1/sweeps", json=SWEEP)
    assert response.status_code == 202, response.text
    sweep = response.json()
    assert response.headers["Location"].endswith(f"/v1/sweeps/{sweep['id']}")
    assert sweep["total"] == 12 and sweep["counts"]["queued"] == 12 and sweep["status"] == "queued"
    assert {tuple(row["values"].values()) for row in sweep["table"]} == {
        (w, h, s) for w in (10, 100, 1000) for h in ("identity", "swish") for s in (0, 1)
    }
    listed = client.get("/v1/jobs", params={"sweep_id": sweep["id"], "limit": 50}).json()["data"]
    assert len(listed) == 12
    assert app.state.broker.depth() == 12


def test_fits_and_status_are_derived_from_the_jobs(client, db):
    sweep = client.post("/v1/sweeps", json=SWEEP).json()
    _finish(db, sweep["id"], {"identity": -0.5, "swish": 0.0})
    done = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert done["status"] == "succeeded" and done["counts"]["succeeded"] == 12
    fits = {fit["group"]["model.output_activation"]: fit for fit in done["fits"]}
    assert fits["identity"]["slope"] == pytest.approx(-0.5)
    assert fits["swish"]["slope"] == pytest.approx(0.0, abs=1e-9)
    assert [point["runs"] for point in fits["identity"]["points"]] == [2, 2, 2]
    assert fits["identity"]["verdict"].startswith("linear head: delta_k_max ∝ x^-0.50")
    png = client.get(f"/v1/sweeps/{sweep['id']}/plot")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png" and png.content[:4] == b"\x89PNG"
    svg = client.get(
        f"/v1/sweeps/{sweep['id']}/plot", params={"x": "model.hidden.0", "y": "delta_k_max", "format": "svg"}
    )
    assert svg.headers["content-type"].startswith("image/svg+xml")


def test_a_width_fit_in_standard_parameterization_at_a_fixed_lr_carries_the_regime_warning(client, db):
    """Grouped by parameterization, the standard group's fit at lr 0.5 says why ΔK need not fall; the ntk group's does not."""
    sweep = client.post(
        "/v1/sweeps",
        json={
            "base": {"model": {"hidden": [10], "activation": "tanh"}, "training": {"max_steps": 5, "lr": 0.5}},
            "grid": {"model.hidden.0": [10, 100], "model.parameterization": ["ntk", "standard"]},
            "fits": [{"y": "delta_k_max", "x": "model.hidden.0", "group_by": ["model.parameterization"]}],
        },
    ).json()
    _finish(db, sweep["id"], {"identity": -0.5})
    fits = {
        fit["group"]["model.parameterization"]: fit for fit in client.get(f"/v1/sweeps/{sweep['id']}").json()["fits"]
    }
    assert fits["ntk"]["warnings"] == []
    (warning,) = fits["standard"]["warnings"]
    assert warning["code"] == "standard_parameterization_fixed_lr" and warning["values"]["lr"] == [0.5]
    assert warning["values"]["points"] == warning["values"]["of"] == 2
    assert "effective step that grows with width" in warning["message"]


def test_cancel_ends_queued_jobs_and_flags_running_ones(client, db):
    sweep = client.post("/v1/sweeps", json=SWEEP).json()
    first = sweep["table"][0]["job_id"]
    written_by_a_worker(db, first, status="running")
    cancelled = client.post(f"/v1/sweeps/{sweep['id']}/cancel").json()
    assert cancelled["counts"]["cancelled"] == 11 and cancelled["counts"]["running"] == 1
    assert client.get(f"/v1/jobs/{first}").json()["cancel_requested"] is True
    written_by_a_worker(db, first, status="cancelled")
    assert client.get(f"/v1/sweeps/{sweep['id']}").json()["status"] == "cancelled"


@pytest.mark.parametrize(
    ("grid", "field"),
    [
        ({"model.hidden.3": [5]}, "model.hidden.3"),
        ({"model.hidden.0": [10, 0]}, "model.hidden.0"),
        ({"model.hidden.0": [5_000_000]}, "model.hidden.0"),
        ({"seed": list(range(501))}, "grid"),
        ({"model.hidden.0,model.hidden.1": [[5]]}, "grid"),
    ],
)
def test_bad_grids_are_refused_naming_the_field_and_store_nothing(client, db, grid, field):
    response = client.post("/v1/sweeps", json={"base": {}, "grid": grid})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert any(error["field"].startswith(field) for error in response.json()["errors"]), response.json()
    assert db.scalars(select(Job)).first() is None


def test_sweep_over_the_active_job_quota_is_429(client_with):
    client = client_with(max_queued_jobs_per_key=5)
    response = client.post("/v1/sweeps", json=SWEEP)
    assert response.status_code == 429 and response.headers["Retry-After"]
    assert response.json()["errors"][0]["limit"] == 5


def test_unknown_sweep_and_bad_plot_axis(client):
    assert client.get("/v1/sweeps/swp_nope").status_code == 404
    sweep = client.post("/v1/sweeps", json={**SWEEP, "fits": []}).json()
    assert client.get(f"/v1/sweeps/{sweep['id']}/plot").status_code == 422
    assert client.get(f"/v1/sweeps/{sweep['id']}/plot", params={"x": "../etc", "y": "delta_k_max"}).status_code == 422


def test_presets_are_listed_and_run_as_sweeps(client):
    listed = client.get("/v1/presets").json()["data"]
    assert {preset["name"] for preset in listed} == set(PRESETS)
    smoke = PRESETS["table1-hessian"].sweep("smoke")
    response = client.post("/v1/presets/table1-hessian", json={"scale": "smoke"})
    assert response.status_code == 202, response.text
    assert response.json()["total"] == grid_size(smoke.grid)
    assert client.post("/v1/presets/nope", json={"scale": "smoke"}).status_code == 404
    assert client.post("/v1/presets/fig1-width", json={"scale": "huge"}).status_code == 422


def test_sweep_tags_are_every_jobs_tags(client):
    sweep = client.post(
        "/v1/sweeps", json={**SWEEP, "tags": ["fig1", "mine"], "base": {**SWEEP["base"], "tags": ["mine", "base"]}}
    ).json()
    job_id = sweep["table"][0]["job_id"]
    assert client.get(f"/v1/jobs/{job_id}").json()["tags"] == ["base", "fig1", "mine"]
    tagged = client.get("/v1/jobs", params={"tag": "fig1", "limit": 50}).json()["data"]
    assert len(tagged) == 12 and all(job["tags"] == ["base", "fig1", "mine"] for job in tagged)


def test_rows_carry_each_fits_axes_even_when_a_linked_axis_set_them(client):
    sweep = client.post("/v1/presets/table1-hessian", json={"scale": "smoke"}).json()
    row = sweep["table"][0]
    assert row["values"]["model.hidden.0"] == row["values"]["model.hidden"][0]
    assert row["values"]["name"] in ("linear head", "swish head", "bottleneck")
