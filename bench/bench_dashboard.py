"""What the dashboard costs the API: requests that open pages make, against the API's read capacity.

    .venv/bin/python -m bench.bench_dashboard [--pages 10] [--seconds 30] [--jobs 40]

A PostgreSQL + Redis stack (ntklab.localstack; NTKLAB_TEST_DATABASE_URL / NTKLAB_TEST_REDIS_URL as
`scripts/services.sh` prints them) with auth on, `--jobs` finished jobs and one long job running.
`--pages` headless Chromium tabs (Debian's /usr/bin/chromium) stay open for `--seconds`: half on
the Jobs table, half on the running job's page (one GET /v1/jobs/{id}/updates?since_step=… per
interval: the job and the metric points the page does not hold yet). Every /v1 request they send
after the pages loaded is counted per endpoint. Then, with the job cancelled and the worker idle,
`wrk -t1 -c16 -d8s` measures the API's capacity (requests/s) on each of those endpoints (updates
asked for the points of the job's last 3 s of training, what one interval brings). The dashboard's share of the API's read capacity is
Σ_endpoint (page requests/s) / (capacity requests/s). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from bench.bench_service import postgres_redis_settings
from ntklab.localstack import LocalStack
from ntklab.store import api_keys
from ntklab.store.db import make_engine, make_session_factory

FINISHED_JOB = {
    "model": {"hidden": [16]},
    "data": {"kind": "gaussian_mixture", "n_train": 8, "input_dim": 4},
    "training": {"max_steps": 20, "target_loss": None},
    "diagnostics": {"hessian": None, "save_weights": False},
}
LONG_JOB = {
    "name": "long",
    "model": {"hidden": [64]},
    "data": {"kind": "gaussian_mixture", "n_train": 16, "input_dim": 4},
    "training": {"max_steps": 200_000, "target_loss": None, "lr": 0.01},
    "diagnostics": {"kernel": {"schedule": "every", "every": 200}, "hessian": None, "save_weights": False},
}
ENDPOINTS = {
    "list": re.compile(r"^/v1/jobs$"),
    "job": re.compile(r"^/v1/jobs/[^/]+$"),
    "metrics": re.compile(r"^/v1/jobs/[^/]+/metrics$"),
    "updates": re.compile(r"^/v1/jobs/[^/]+/updates$"),
}
INTERVAL_S = 3.0  # the job page's polling interval (service/ui/static/js/views/job.js POLL_MS)


def new_key(database_url: str) -> str:
    engine = make_engine(database_url)
    with make_session_factory(engine)() as session:
        secret = api_keys.create_key(session, "dashboard-bench").secret
    engine.dispose()
    return secret


def submit(client: httpx.Client, spec: dict) -> str:
    response = client.post("/v1/jobs", json=spec)
    response.raise_for_status()
    return response.json()["id"]


def wait_for(client: httpx.Client, job_id: str, statuses: tuple[str, ...]) -> None:
    while client.get(f"/v1/jobs/{job_id}").json()["status"] not in statuses:
        time.sleep(0.1)


def page_requests(url: str, key: str, long_id: str, pages: int, seconds: float) -> Counter:
    """Requests per endpoint kind that `pages` open tabs send in `seconds` (after each finished loading)."""
    counts: Counter = Counter()
    counting = False

    def count(request) -> None:
        path = httpx.URL(request.url).path
        for kind, pattern in ENDPOINTS.items():
            if counting and pattern.match(path):
                counts[kind] += 1

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium")
        context = browser.new_context()
        context.add_init_script(f"sessionStorage.setItem('ntklab.apiKey', {key!r})")
        context.on("request", count)
        for index in range(pages):
            page = context.new_page()
            page.goto(f"{url}/ui/#/jobs" if index % 2 == 0 else f"{url}/ui/#/jobs/{long_id}")
            page.locator("main h1").wait_for()
        counting = True
        page.wait_for_timeout(seconds * 1000)  # Playwright delivers request events only while it runs
        counting = False
        browser.close()
    return counts


def capacity(url: str, key: str, path: str) -> float:
    """Requests/s that `wrk -t1 -c16 -d8s` gets from GET `path`."""
    out = subprocess.run(
        ["wrk", "-t1", "-c16", "-d8s", "-H", f"X-API-Key: {key}", f"{url}{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--jobs", type=int, default=40)
    args = parser.parse_args()
    with postgres_redis_settings() as settings, tempfile.TemporaryDirectory() as logs:
        key = new_key(settings["NTKLAB_DATABASE_URL"])
        with LocalStack(settings | {"NTKLAB_AUTH": "on"}, Path(logs)) as stack:
            client = httpx.Client(base_url=stack.url, headers={"X-API-Key": key}, timeout=30)
            finished = [submit(client, FINISHED_JOB) for _ in range(args.jobs)]
            wait_for(client, finished[-1], ("succeeded",))
            long_id = submit(client, LONG_JOB)
            wait_for(client, long_id, ("running",))
            counts = page_requests(stack.url, key, long_id, args.pages, args.seconds)
            interval_start = client.get(f"/v1/jobs/{long_id}").json()["progress"]["step"]
            time.sleep(INTERVAL_S)
            client.post(f"/v1/jobs/{long_id}/cancel")
            wait_for(client, long_id, ("cancelled",))
            paths = {
                "list": "/v1/jobs?limit=20",
                "job": f"/v1/jobs/{long_id}",
                "metrics": f"/v1/jobs/{long_id}/metrics",
                "updates": f"/v1/jobs/{long_id}/updates?since_step={interval_start}",
            }
            capacities = {kind: capacity(stack.url, key, path) for kind, path in paths.items() if counts[kind]}
    print(
        f"{args.pages} open pages ({(args.pages + 1) // 2} Jobs tables, {args.pages // 2} running-job pages) "
        f"for {args.seconds:.0f} s; capacity by wrk -t1 -c16 -d8s, one API process, auth on\n"
    )
    print("| endpoint | page requests/s | API capacity (requests/s) | share of capacity |")
    print("|---|---|---|---|")
    total = 0.0
    for kind, path in paths.items():
        if kind not in capacities:
            continue
        rate = counts[kind] / args.seconds
        share = rate / capacities[kind]
        total += share
        shown = re.sub(r"since_step=\d+", "since_step=…", path.replace(long_id, "{id}"))
        print(f"| GET {shown} | {rate:.2f} | {capacities[kind]:.0f} | {100 * share:.2f} % |")
    print(f"| **all** | {sum(counts.values()) / args.seconds:.2f} | | **{100 * total:.2f} %** |")


if __name__ == "__main__":
    main()
