"""API keys on a real database: stored hashed, found by the hash of the exact secret, 401s, and one key never sees another's rows."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import select, update

from ntklab.service.api.auth import KeyCache
from ntklab.store import api_keys
from ntklab.store.models import ApiKey, Job, MetricChunk, Sweep
from tests.fake_clock import FakeClock
from tests.stored_artifacts import add_artifact

SMALL = {"model": {"hidden": [8]}, "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}}
SWEEP = {
    "base": {"model": {"hidden": [8]}, "training": {"max_steps": 5}},
    "grid": {"model.hidden.0": [8, 16]},
    "fits": [{"y": "delta_k_max", "x": "model.hidden.0"}],
}


@pytest.fixture
def secured(client_with):
    return client_with(auth="on")


def new_key(client, name: str, *, admin: bool = False) -> dict[str, str]:
    """Headers carrying a fresh key's secret."""
    with client.app.state.sessions() as session:
        made = api_keys.create_key(session, name, is_admin=admin)
    return {"X-API-Key": made.secret}


def submit(client, headers, body=None, path="/v1/jobs") -> dict:
    answer = client.post(path, json=SMALL if body is None else body, headers=headers)
    assert answer.status_code == 202, answer.text
    return answer.json()


def assert_unauthorized(answer) -> None:
    assert answer.status_code == 401, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert answer.json()["type"] == "urn:ntklab:problem:unauthorized"


# --------------------------------------------------------------------------- the key store


def test_keys_are_stored_as_sha256_only(secured):
    with secured.app.state.sessions() as session:
        made = api_keys.create_key(session, "alice")
        row = session.execute(select(ApiKey.__table__)).one()._asdict()
    assert made.secret.startswith("ntk_") and len(made.secret) >= 40
    assert row["secret_hash"] == hashlib.sha256(made.secret.encode()).hexdigest()
    assert row["prefix"] == made.secret[:12] and row["name"] == "alice" and row["is_admin"] is False
    assert not any(made.secret in str(value) for value in row.values()), "the secret itself is nowhere in the row"


def test_a_key_is_found_by_the_hash_of_its_exact_secret_only(secured):
    """The stored digest, a secret sharing the display prefix, a near miss or a revoked key find nothing."""
    with secured.app.state.sessions() as session:
        alice, bob = api_keys.create_key(session, "alice"), api_keys.create_key(session, "bob")
        secret = alice.secret
        assert api_keys.find_active(session, secret).id == alice.key.id
        assert api_keys.find_active(session, bob.secret).id == bob.key.id
        stored = session.scalar(select(ApiKey.secret_hash).where(ApiKey.id == alice.key.id))
        flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
        for wrong in [
            stored,
            flipped,
            secret[:12] + bob.secret[12:],
            secret + "x",
            secret[:-1],
            secret.upper(),
            " " + secret,
            secret[:12],
        ]:
            assert api_keys.find_active(session, wrong) is None, wrong
        assert api_keys.revoke(session, alice.key.id)
        assert api_keys.find_active(session, secret) is None, "a revoked key is not active"
        assert api_keys.find_active(session, bob.secret).id == bob.key.id, "revoking alice leaves bob's key alone"


# --------------------------------------------------------------------------- 401


def test_no_key_a_wrong_key_and_a_revoked_key_are_401(client_with):
    secured = client_with(auth="on", auth_cache_s=0)
    headers = new_key(secured, "alice")
    assert_unauthorized(secured.get("/v1/jobs"))
    assert_unauthorized(secured.get("/v1/presets"))
    assert_unauthorized(secured.post("/v1/jobs", json=SMALL))
    assert_unauthorized(secured.get("/v1/jobs", headers={"X-API-Key": headers["X-API-Key"] + "x"}))
    assert_unauthorized(secured.get("/v1/jobs", headers={"Authorization": "Basic " + headers["X-API-Key"]}))
    assert secured.get("/v1/jobs", headers=headers).status_code == 200
    assert secured.get("/v1/jobs", headers={"Authorization": f"Bearer {headers['X-API-Key']}"}).status_code == 200
    with secured.app.state.sessions() as session:
        key_id = api_keys.find_active(session, headers["X-API-Key"]).id
        assert api_keys.revoke(session, key_id) is True
        assert api_keys.revoke(session, key_id) is False
    assert_unauthorized(secured.get("/v1/jobs", headers=headers))
    assert secured.get("/healthz").status_code == 200, "health probes need no key"


def test_a_remembered_key_is_looked_up_again_after_auth_cache_s(client_with):
    """Within auth_cache_s a process answers a revoked key from memory; after it, 401 (on a clock the test advances)."""
    cache_s = 2.0
    secured = client_with(auth="on", auth_cache_s=cache_s)
    clock = FakeClock()
    secured.app.state.key_cache = KeyCache(cache_s, clock=clock)
    headers = new_key(secured, "alice")
    assert secured.get("/v1/jobs", headers=headers).status_code == 200
    with secured.app.state.sessions() as session:
        key_id = api_keys.find_active(session, headers["X-API-Key"]).id
        api_keys.revoke(session, key_id)
    assert secured.get("/v1/jobs", headers=headers).status_code == 200, "remembered for auth_cache_s"
    clock.advance(cache_s + 0.1)
    assert_unauthorized(secured.get("/v1/jobs", headers=headers))


def test_an_unknown_key_is_not_remembered(secured):
    """A key made after a 401 for its secret works at once."""
    secret = api_keys.make_secret()
    assert_unauthorized(secured.get("/v1/jobs", headers={"X-API-Key": secret}))
    with secured.app.state.sessions() as session:
        api_keys.create_key(session, "late", secret=secret)
    assert secured.get("/v1/jobs", headers={"X-API-Key": secret}).status_code == 200


def test_auth_off_is_the_anonymous_owner(client):
    job = submit(client, {})
    with client.app.state.sessions() as session:
        assert session.scalar(select(Job.owner).where(Job.id == job["id"])) == "anonymous"


def test_the_bootstrap_admin_key_is_made_once_at_start_up(client_with):
    secret = api_keys.make_secret()
    first = client_with(auth="on", bootstrap_admin_key=secret)
    client_with(auth="on", bootstrap_admin_key=secret)
    with first.app.state.sessions() as session:
        keys = api_keys.list_keys(session)
    assert len(keys) == 1 and keys[0].is_admin and keys[0].secret_hash == api_keys.digest(secret)
    assert first.get("/v1/jobs", headers={"X-API-Key": secret}).status_code == 200


def test_an_empty_bootstrap_key_makes_nothing_and_a_weak_one_stops_the_start(client_with):
    with client_with(auth="on", bootstrap_admin_key="").app.state.sessions() as session:
        assert api_keys.list_keys(session) == []
    with pytest.raises(ValueError, match="at least 32 characters"):
        client_with(auth="on", bootstrap_admin_key="ntk_short")


# --------------------------------------------------------------------------- isolation


def _finished_job_with_outputs(client, headers) -> str:
    job_id = submit(client, headers)["id"]
    with client.app.state.sessions() as session:
        session.execute(update(Job).where(Job.id == job_id).values(status="succeeded", summary={"final_loss": 0.1}))
        session.add(MetricChunk(job_id=job_id, name="loss", chunk=0, steps=[0, 1], values=[1.0, 0.5]))
        add_artifact(session, job_id, "eigs.json", "application/json", b"[]")
        session.commit()
    return job_id


def _endpoints(job_id: str, running_id: str, sweep_id: str) -> list[tuple[str, str]]:
    return [
        ("GET", f"/v1/jobs/{job_id}"),
        ("GET", f"/v1/jobs/{job_id}/metrics"),
        ("GET", f"/v1/jobs/{job_id}/artifacts"),
        ("GET", f"/v1/jobs/{job_id}/artifacts/eigs.json"),
        ("POST", f"/v1/jobs/{running_id}/cancel"),
        ("DELETE", f"/v1/jobs/{job_id}"),
        ("GET", f"/v1/sweeps/{sweep_id}"),
        ("GET", f"/v1/sweeps/{sweep_id}/plot"),
        ("POST", f"/v1/sweeps/{sweep_id}/cancel"),
    ]


def test_another_keys_job_and_sweep_are_404_on_every_endpoint(secured):
    alice, bob = new_key(secured, "alice"), new_key(secured, "bob")
    job_id = _finished_job_with_outputs(secured, alice)
    queued_id = submit(secured, alice)["id"]
    sweep_id = submit(secured, alice, SWEEP, "/v1/sweeps")["id"]
    for method, path in _endpoints(job_id, queued_id, sweep_id):
        answer = secured.request(method, path, headers=bob)
        assert answer.status_code == 404, (method, path, answer.status_code)
        assert answer.json()["type"] == "about:blank"
    assert secured.get("/v1/jobs", params={"sweep_id": sweep_id}, headers=bob).json()["data"] == []
    with secured.app.state.sessions() as session:
        statuses = dict(session.execute(select(Job.id, Job.status)).all())
        assert statuses[job_id] == "succeeded" and statuses[queued_id] == "queued", (
            "bob's cancel and delete did nothing"
        )
        assert session.scalar(select(Sweep.cancel_requested).where(Sweep.id == sweep_id)) is False
    for method, path in _endpoints(job_id, queued_id, sweep_id):
        assert secured.request(method, path, headers=alice).status_code in (200, 202, 204), (method, path)


def test_lists_never_leak_another_keys_jobs(secured):
    alice, bob, admin = new_key(secured, "alice"), new_key(secured, "bob"), new_key(secured, "root", admin=True)
    mine = {
        "alice": {submit(secured, alice)["id"] for _ in range(5)},
        "bob": {submit(secured, bob)["id"] for _ in range(3)},
    }
    mine["alice"] |= {row["job_id"] for row in submit(secured, alice, SWEEP, "/v1/sweeps")["table"]}
    assert page_through(secured, alice) == mine["alice"]
    assert page_through(secured, bob) == mine["bob"]
    assert page_through(secured, admin) == mine["alice"] | mine["bob"], "the admin key lists everyone's jobs"


def page_through(client, headers) -> set[str]:
    seen: list[str] = []
    params = {"limit": 2}
    while True:
        page = client.get("/v1/jobs", params=params, headers=headers).json()
        seen += [job["id"] for job in page["data"]]
        if not page["has_more"]:
            assert len(seen) == len(set(seen))
            return set(seen)
        params["after"] = page["next"]


def test_the_admin_key_reads_and_cancels_everyones_rows_and_owns_what_it_creates(secured):
    alice, admin = new_key(secured, "alice"), new_key(secured, "root", admin=True)
    job_id = _finished_job_with_outputs(secured, alice)
    sweep_id = submit(secured, alice, SWEEP, "/v1/sweeps")["id"]
    assert secured.get(f"/v1/jobs/{job_id}/metrics", headers=admin).json()["loss"]["value"] == [1.0, 0.5]
    assert secured.get(f"/v1/sweeps/{sweep_id}", headers=admin).json()["total"] == 2
    assert secured.post(f"/v1/sweeps/{sweep_id}/cancel", headers=admin).json()["status"] == "cancelled"
    own = submit(secured, admin)["id"]
    assert secured.get(f"/v1/jobs/{own}", headers=alice).status_code == 404
