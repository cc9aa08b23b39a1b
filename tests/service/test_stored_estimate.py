"""A job's estimate is stored at submission (jobs.estimate, migration 0015) and GET reads it back, on both backends.

GET answers the estimate made at submission, at that moment's rates, even after the deployment's rates change;
a job stored before 0015 (estimate NULL) is estimated from its spec at the current rates, as before.
"""

from __future__ import annotations

from sqlalchemy import update

from ntklab.api_schemas.spec import JobSpec
from ntklab.planner.estimate import estimate_job
from ntklab.service.caps import time_rates
from ntklab.store.job_estimates import estimate_document, stored_estimate
from ntklab.store.models import Job

SPEC = {
    "data": {"kind": "gaussian_mixture", "n_train": 64, "input_dim": 8, "classes": 3},
    "model": {"hidden": [128]},
    "training": {"max_steps": 300},
}


def test_the_row_holds_the_estimate_made_at_submission(client, db, settings):
    created = client.post("/v1/jobs", json=SPEC).json()
    stored = db.query(Job).filter_by(id=created["id"]).one()
    expected = estimate_job(JobSpec.model_validate(created["spec"]), time_rates(settings))
    assert stored.estimate == estimate_document(expected)
    assert stored_estimate(stored.estimate) == expected


def test_get_answers_the_stored_estimate_after_the_rates_change(client_with):
    first = client_with(estimate_flops_per_s=1e9, estimate_seconds_per_op=2e-5)
    created = first.post("/v1/jobs", json=SPEC).json()
    later = client_with(estimate_flops_per_s=4e9, estimate_seconds_per_op=1e-5)
    shown = later.get(f"/v1/jobs/{created['id']}").json()["estimate"]
    assert shown == created["estimate"]
    assert shown["rates"]["flops_per_s"] == 1e9 and shown["rates"]["source"] == "settings"
    fresh = later.post("/v1/jobs", params={"dry_run": "true"}, json=SPEC).json()
    assert fresh["rates"]["flops_per_s"] == 4e9 and fresh["seconds"] < shown["seconds"], "the new rates are faster"


def test_a_job_stored_before_0015_is_estimated_from_its_spec(client, db):
    created = client.post("/v1/jobs", json=SPEC).json()
    db.execute(update(Job).where(Job.id == created["id"]).values(estimate=None))
    db.commit()
    assert db.query(Job.estimate).filter_by(id=created["id"]).scalar() is None
    assert client.get(f"/v1/jobs/{created['id']}").json()["estimate"] == created["estimate"]
