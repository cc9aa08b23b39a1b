"""Per-key limits on a real database: requests per second (in-process and shared through Redis) and active jobs."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select

from ntklab.service.problems import ProblemError
from ntklab.service.rate_limit import RateLimiter, requests_per_second, retry_after_s, storage_for
from ntklab.store import api_keys
from ntklab.store.models import Job
from tests.fake_clock import FakeClock

SMALL = {"model": {"hidden": [8]}, "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4}}
SWEEP = {"base": {"model": {"hidden": [8]}, "training": {"max_steps": 5}}, "grid": {"seed": [0, 1]}}
WINDOW_S = 1.0


def new_key(client, name: str) -> dict[str, str]:
    with client.app.state.sessions() as session:
        return {"X-API-Key": api_keys.create_key(session, name).secret}


def assert_rate_limited(answer, limit: int) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["retry-after"] == "1"
    body = answer.json()
    assert body["type"] == "urn:ntklab:problem:rate-limited"
    assert body["errors"][0]["field"] == "requests_per_second" and body["errors"][0]["limit"] == limit


def wait_for_the_window() -> None:
    time.sleep(WINDOW_S + 0.05)


# --------------------------------------------------------------------------- requests per second


def test_a_key_over_its_rate_is_429_until_the_window_passes_and_other_keys_are_unaffected(client_with):
    client = client_with(auth="on", rate_limit_per_s=3)
    alice, bob = new_key(client, "alice"), new_key(client, "bob")
    wait_for_the_window()
    assert [client.get("/v1/jobs", headers=alice).status_code for _ in range(3)] == [200, 200, 200]
    assert_rate_limited(client.get("/v1/jobs", headers=alice), 3)
    assert_rate_limited(client.post("/v1/jobs", json=SMALL, headers=alice), 3)
    assert client.get("/v1/jobs", headers=bob).status_code == 200, "the limit is per key"
    wait_for_the_window()
    assert client.get("/v1/jobs", headers=alice).status_code == 200, "the key recovers after the window"


def test_unknown_keys_are_401_before_they_count(client_with):
    client = client_with(auth="on", rate_limit_per_s=1)
    alice = new_key(client, "alice")
    wait_for_the_window()
    assert {client.get("/v1/jobs", headers={"X-API-Key": "ntk_wrong"}).status_code for _ in range(5)} == {401}
    assert client.get("/v1/jobs", headers=alice).status_code == 200


def test_failed_key_checks_from_one_address_are_429_past_the_limit_and_remembered_keys_still_work(client_with):
    client = client_with(auth="on", auth_failures_per_minute=3)
    alice = new_key(client, "alice")
    assert client.get("/v1/jobs", headers=alice).status_code == 200
    wrong = {"X-API-Key": "ntk_" + "x" * 43}
    assert [client.get("/v1/jobs", headers=wrong).status_code for _ in range(3)] == [401, 401, 401]
    refused = client.get("/v1/jobs", headers=wrong)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["errors"][0] | {"message": ""} == {
        "field": "auth_failures_per_minute",
        "message": "",
        "limit": 3,
    }
    assert client.get("/v1/jobs", headers=alice).status_code == 200, "a key already remembered is not looked up"
    bob = new_key(client, "bob")
    assert client.get("/v1/jobs", headers=bob).status_code == 429, "nothing is looked up for this address now"


def test_no_failed_check_limit_when_the_setting_is_zero(client_with):
    client = client_with(auth="on", auth_failures_per_minute=0)
    assert {client.get("/v1/jobs", headers={"X-API-Key": "ntk_wrong"}).status_code for _ in range(40)} == {401}


def test_no_limit_when_the_setting_is_zero(client_with):
    client = client_with(rate_limit_per_s=0)
    assert {client.get("/v1/presets").status_code for _ in range(50)} == {200}


def test_api_processes_on_one_redis_share_each_keys_window(client_with, redis_url):
    """Two apps (two API processes: separate memory) count one key's requests in one Redis window."""
    shared = {
        "auth": "on",
        "rate_limit_per_s": 3,
        "broker_url": redis_url,
        "queue": f"ntklab-test-{uuid.uuid4().hex[:8]}",
    }
    first, second = client_with(**shared), client_with(**shared)
    alice = new_key(first, "alice")
    wait_for_the_window()
    answers = [client.get("/v1/jobs", headers=alice).status_code for client in (first, second, first)]
    assert answers == [200, 200, 200]
    assert_rate_limited(second.get("/v1/jobs", headers=alice), 3)
    assert_rate_limited(first.get("/v1/jobs", headers=alice), 3)
    wait_for_the_window()
    assert second.get("/v1/jobs", headers=alice).status_code == 200


def test_the_retry_after_is_counted_from_the_limiters_clock():
    """The window frees its slot 1 s after the hit; on a clock 5.5 s behind, that is 6.5 s away: a Retry-After of 7."""
    clock = FakeClock(start=time.time() - 5.5)
    limiter = RateLimiter(requests_per_second(1), storage_for("filesystem://"), "test-clock", clock=clock)
    limiter.check("alice")
    with pytest.raises(ProblemError) as refused:
        limiter.check("alice")
    assert refused.value.headers["Retry-After"] == "7"


def test_retry_after_rounds_up_to_whole_seconds():
    assert retry_after_s(reset_at=100.2, now=100.0) == 1
    assert retry_after_s(reset_at=101.5, now=100.0) == 2
    assert retry_after_s(reset_at=99.0, now=100.0) == 1


# --------------------------------------------------------------------------- active jobs


def test_the_active_job_quota_is_per_key(client_with):
    client = client_with(auth="on", max_queued_jobs_per_key=2)
    alice, bob = new_key(client, "alice"), new_key(client, "bob")
    assert [client.post("/v1/jobs", json=SMALL, headers=alice).status_code for _ in range(3)] == [202, 202, 429]
    over = client.post("/v1/sweeps", json=SWEEP, headers=alice)
    assert over.status_code == 429 and over.json()["type"] == "urn:ntklab:problem:too-many-active-jobs"
    assert over.json()["errors"][0] == {
        "field": "active_jobs",
        "limit": 2,
        "value": 2,
        "message": over.json()["errors"][0]["message"],
    }
    assert client.post("/v1/sweeps", json=SWEEP, headers=bob).status_code == 202, "alice's jobs do not count for bob"


@pytest.mark.parametrize("path, body, per_request", [("/v1/jobs", SMALL, 1), ("/v1/sweeps", SWEEP, 2)])
def test_concurrent_submissions_never_pass_the_quota(client_with, path, body, per_request):
    client = client_with(auth="on", max_queued_jobs_per_key=6)
    alice = new_key(client, "alice")
    with ThreadPoolExecutor(max_workers=8) as pool:
        codes = list(pool.map(lambda _: client.post(path, json=body, headers=alice).status_code, range(12)))
    assert codes.count(202) == 6 // per_request and codes.count(429) == 12 - 6 // per_request
    with client.app.state.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 6
