"""The SDK against a deliberately flaky ntklab look-alike served by uvicorn on a loopback port.

The server keeps one job per Idempotency-Key, answers scripted faults (a status with an
optional Retry-After, a delay, or a fault *after* the job was stored — the lost-response
case), validates specs with the real JobSpec and answers problem+json like the service.
Every body it sends is built by the wire contract's own models (ntklab.api_schemas.resources and
.problems) and dumped as the service dumps them, never typed out by hand: a field the
contract adds, drops, renames or retypes breaks this server too. A handler that raises
(a model refusing what it is given) fails the test that made the request, with that error.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import io
import socket
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

import httpx
import numpy as np
import pytest
import uvicorn
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ntklab import errors
from ntklab.api_schemas.field_errors import field_errors
from ntklab.api_schemas.problems import PROBLEM_MEDIA_TYPE, FieldError, Problem
from ntklab.api_schemas.resources import Job, JobError, JobPage, Progress, Series
from ntklab.api_schemas.spec import JobSpec
from ntklab.client import AsyncClient, Client

TOTAL_STEPS = 3
CREATED = dt.datetime(2025, 1, 1, 12, tzinfo=dt.UTC)


@dataclass
class Fault:
    status: int | None = None
    retry_after: str | None = None
    delay_s: float = 0.0
    after_commit: bool = False


@dataclass
class FlakyService:
    jobs: dict[str, dict] = field(default_factory=dict)
    job_by_key: dict[str, str] = field(default_factory=dict)
    faults: dict[str, deque[Fault]] = field(default_factory=lambda: defaultdict(deque))
    requests: list[tuple[str, str, dict, float]] = field(default_factory=list)
    poll_retry_after: str | None = None
    crashes: list[Exception] = field(default_factory=list)

    def inject(self, route: str, *faults: Fault) -> None:
        self.faults[route].extend(faults)

    def seen(self, method: str, path_prefix: str) -> list[tuple[str, str, dict, float]]:
        return [r for r in self.requests if r[0] == method and r[1].startswith(path_prefix)]

    async def _fault(self, route: str) -> Fault | None:
        if not self.faults[route]:
            return None
        fault = self.faults[route].popleft()
        if fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        return fault

    def _keeping_crashes(self, handler):
        @functools.wraps(handler)
        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as crash:
                self.crashes.append(crash)
                raise

        return handle

    def app(self) -> Starlette:
        async def record(request: Request) -> None:
            self.requests.append((request.method, request.url.path, dict(request.headers), time.monotonic()))

        async def create(request: Request) -> Response:
            await record(request)
            fault = await self._fault("create")
            if fault and fault.status and not fault.after_commit:
                return _problem(fault.status, "Service Unavailable", retry_after=fault.retry_after)
            body = await request.json()
            try:
                spec = JobSpec.model_validate(body)
            except ValidationError as exc:
                located = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
                fields = field_errors(located, body)  # as the service names them (model.hidden.0, no union tags)
                return _problem(422, "Invalid job spec", errors=fields)
            key = request.headers.get("idempotency-key")
            if key not in self.job_by_key:
                job_id = f"job_{len(self.jobs) + 1}"
                self.jobs[job_id] = {"id": job_id, "status": "queued", "name": spec.name, "polls": 0}
                self.job_by_key[key] = job_id
            job = self.jobs[self.job_by_key[key]]
            if fault and fault.after_commit:
                return _problem(fault.status, "Bad Gateway", retry_after=fault.retry_after)
            return JSONResponse(_public(job), status_code=202, headers={"Retry-After": "1", "Location": job["id"]})

        async def retrieve(request: Request) -> Response:
            await record(request)
            fault = await self._fault("retrieve")
            if fault and fault.status:
                return _problem(fault.status, "Scripted", retry_after=fault.retry_after)
            job = self.jobs.get(request.path_params["job_id"])
            if job is None:
                return _problem(404, "Not Found", detail="no such job")
            _advance(job)
            headers = (
                {"Retry-After": self.poll_retry_after} if self.poll_retry_after and job["status"] == "running" else {}
            )
            return JSONResponse(_public(job), headers=headers)

        async def listing(request: Request) -> Response:
            await record(request)
            ids = sorted(self.jobs, key=lambda i: int(i.split("_")[1]))
            after = request.query_params.get("after")
            limit = int(request.query_params.get("limit", 2))
            start = ids.index(after) + 1 if after else 0
            page = ids[start : start + limit]
            has_more = start + limit < len(ids)
            answer = JobPage(
                data=[_resource(self.jobs[i]) for i in page], has_more=has_more, next=page[-1] if has_more else None
            )
            return JSONResponse(answer.model_dump(mode="json"))

        async def metrics(request: Request) -> Response:
            await record(request)
            series = {
                "loss": Series(step=[0, 1, 2], value=[1.0, 0.5, None]),
                "delta_k": Series(step=[0, 2], value=[0.0, 0.1]),
            }
            names = request.query_params.get("names")
            wanted = names.split(",") if names else list(series)
            return JSONResponse({name: series[name].model_dump(mode="json") for name in wanted if name in series})

        async def artifact(request: Request) -> Response:
            await record(request)
            buffer = io.BytesIO()
            np.save(buffer, np.arange(6.0).reshape(2, 3))
            return Response(buffer.getvalue(), media_type="application/octet-stream")

        async def cancel(request: Request) -> Response:
            await record(request)
            job = self.jobs[request.path_params["job_id"]]
            job["status"] = "cancelled"
            return JSONResponse(_public(job), status_code=202)

        return Starlette(
            routes=[
                Route(path, self._keeping_crashes(handler), methods=[method])
                for method, path, handler in [
                    ("POST", "/v1/jobs", create),
                    ("GET", "/v1/jobs", listing),
                    ("GET", "/v1/jobs/{job_id}", retrieve),
                    ("GET", "/v1/jobs/{job_id}/metrics", metrics),
                    ("GET", "/v1/jobs/{job_id}/artifacts/{name}", artifact),
                    ("POST", "/v1/jobs/{job_id}/cancel", cancel),
                ]
            ]
        )


def _advance(job: dict) -> None:
    """Each poll moves a job one step: queued → running 1/3, 2/3 → succeeded (or failed if named 'doomed')."""
    if job["status"] in ("succeeded", "failed", "cancelled"):
        return
    job["polls"] += 1
    if job["polls"] >= TOTAL_STEPS:
        job["status"] = "failed" if job["name"] == "doomed" else "succeeded"
    else:
        job["status"] = "running"


def _resource(job: dict) -> Job:
    """The job as the contract's Job model holds it (a missing, unknown or mistyped field raises here)."""
    step = min(job["polls"], TOTAL_STEPS)
    return Job(
        id=job["id"],
        name=job["name"],
        status=job["status"],
        tags=[],
        sweep_id=None,
        parameters=42,
        attempts=1 if job["polls"] else 0,
        device="cpu",
        cancel_requested=job["status"] == "cancelled",
        progress=Progress(step=step, total=TOTAL_STEPS, phase="train", eta_s=float(TOTAL_STEPS - step)),
        summary={"delta_k_max": 0.1} if job["status"] == "succeeded" else None,
        error=JobError(type="diverged", message="diverged badly") if job["status"] == "failed" else None,
        created_at=CREATED,
        enqueued_at=CREATED,
        started_at=CREATED if job["polls"] else None,
        finished_at=None,
        spec=None,
    )


def _public(job: dict) -> dict:
    """The job's JSON, dumped from the model as the service's response_model=Job dumps it."""
    return _resource(job).model_dump(mode="json")


def _problem(
    status: int,
    title: str,
    *,
    detail: str | None = None,
    errors: list[FieldError] | None = None,
    retry_after: str | None = None,
) -> Response:
    body = Problem(title=title, status=status, detail=detail or title, errors=errors).body()
    headers = {"Retry-After": retry_after} if retry_after else {}
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


@pytest.fixture
def service():
    state = FlakyService()
    server = uvicorn.Server(
        uvicorn.Config(state.app(), host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=1)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "flaky server did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    state.url = f"http://127.0.0.1:{port}"
    yield state
    server.should_exit = True
    thread.join(timeout=5)
    if state.crashes:
        raise state.crashes[0]


def _client(service, **kwargs) -> Client:
    return Client(base_url=service.url, **kwargs)


SPEC = {"name": "ok", "model": {"hidden": [8]}, "training": {"max_steps": 5}}


# --------------------------------------------------------------------------- retries


def test_503_then_success_makes_exactly_one_job(service):
    service.inject("create", Fault(status=503, after_commit=True))
    with _client(service) as client:
        job = client.jobs.create(SPEC)
    posts = service.seen("POST", "/v1/jobs")
    keys = {headers["idempotency-key"] for _, _, headers, _ in posts}
    assert len(posts) == 2
    assert len(keys) == 1
    assert list(service.jobs) == [job.id]


def test_each_create_call_gets_its_own_key(service):
    with _client(service) as client:
        first, second = client.jobs.create(SPEC), client.jobs.create(SPEC)
    assert first.id != second.id
    assert len(service.job_by_key) == 2


def test_explicit_idempotency_key_replays_the_first_job(service):
    with _client(service) as client:
        first = client.jobs.create(SPEC, idempotency_key="mine")
        again = client.jobs.create(SPEC, idempotency_key="mine")
    assert first.id == again.id
    assert list(service.job_by_key) == ["mine"]


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured(service, status):
    service.inject("create", Fault(status=status, retry_after="1"))
    with _client(service) as client:
        client.jobs.create(SPEC)
    first, second = service.seen("POST", "/v1/jobs")
    assert second[3] - first[3] >= 1.0


def test_retry_after_http_date_is_honoured(service):
    when = time.time() + 3  # whole seconds on the wire: at least 2 s ahead after truncation
    service.inject(
        "create", Fault(status=503, retry_after=time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(when)))
    )
    with _client(service) as client:
        client.jobs.create(SPEC)
    first, second = service.seen("POST", "/v1/jobs")
    assert second[3] - first[3] >= 1.5


def test_422_raises_at_once_naming_the_field(service):
    with _client(service, max_retries=5) as client, pytest.raises(errors.UnprocessableEntityError) as caught:
        client.jobs.create({"model": {"hidden": [0]}})
    assert caught.value.status == 422
    assert "model.hidden.0" in caught.value.fields
    assert "model.hidden.0" in str(caught.value)
    assert caught.value.response.headers["content-type"] == "application/problem+json"
    assert len(service.seen("POST", "/v1/jobs")) == 1


def test_persistent_5xx_gives_up_after_max_retries(service):
    service.inject("retrieve", *[Fault(status=500)] * 3)
    with _client(service, max_retries=2) as client, pytest.raises(errors.InternalServerError) as caught:
        client.jobs.retrieve("job_1")
    assert caught.value.status == 500
    assert len(service.seen("GET", "/v1/jobs/job_1")) == 3


def test_connection_refused_is_an_api_connection_error_after_retries():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sent = []
    http = httpx.Client(event_hooks={"request": [sent.append]})
    started = time.monotonic()
    with Client(base_url=f"http://127.0.0.1:{port}", max_retries=2, http_client=http) as client:
        with pytest.raises(errors.APIConnectionError) as caught:
            client.jobs.retrieve("job_1")
    assert not isinstance(caught.value, errors.APITimeoutError)
    assert len(sent) == 3
    assert time.monotonic() - started >= 0.5 + 1.0


def test_timeout_is_an_api_timeout_error(service):
    service.inject("retrieve", Fault(delay_s=1.0), Fault(delay_s=1.0))
    with _client(service, timeout=0.2, max_retries=1) as client, pytest.raises(errors.APITimeoutError):
        client.jobs.retrieve("job_1")
    assert len(service.seen("GET", "/v1/jobs/job_1")) == 2


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, errors.BadRequestError),
        (401, errors.AuthenticationError),
        (403, errors.PermissionDeniedError),
        (404, errors.NotFoundError),
        (409, errors.ConflictError),
        (413, errors.PayloadTooLargeError),
        (422, errors.UnprocessableEntityError),
        (502, errors.InternalServerError),
    ],
)
def test_one_exception_class_per_status(service, status, cls):
    service.inject("retrieve", Fault(status=status))
    with _client(service, max_retries=0) as client, pytest.raises(cls) as caught:
        client.jobs.retrieve("job_1")
    assert isinstance(caught.value, errors.APIStatusError)
    assert (caught.value.status, caught.value.title) == (status, "Scripted")


# --------------------------------------------------------------------------- resources


def test_wait_follows_the_job_to_success_silently_off_a_terminal(service, capfd):
    with _client(service) as client:
        job = client.jobs.create(SPEC)
        done = client.jobs.wait(job.id, poll_interval=0.01)
    assert done.status == "succeeded"
    assert done.summary == {"delta_k_max": 0.1}
    assert capfd.readouterr().err == ""


def test_wait_honours_retry_after_between_polls(service):
    service.poll_retry_after = "1"
    with _client(service) as client:
        job = client.jobs.create(SPEC)
        client.jobs.wait(job.id, poll_interval=0.01)
    times = [t for _, _, _, t in service.seen("GET", f"/v1/jobs/{job.id}")]
    assert len(times) == TOTAL_STEPS
    assert min(np.diff(times)) >= 1.0


def test_wait_raises_job_failed_error_carrying_the_job(service):
    with _client(service) as client:
        job = client.jobs.create(SPEC | {"name": "doomed"})
        with pytest.raises(errors.JobFailedError) as caught:
            client.jobs.wait(job, poll_interval=0.01)
    assert caught.value.job.status == "failed"
    assert "diverged badly" in str(caught.value)


def test_wait_gives_up_after_its_timeout(service):
    service.poll_retry_after = "5"
    with _client(service) as client:
        job = client.jobs.create(SPEC)
        with pytest.raises(errors.WaitTimeoutError) as caught:
            client.jobs.wait(job.id, timeout=0.5)
    assert caught.value.resource.status == "running"


def test_cancel_then_wait_raises(service):
    with _client(service) as client:
        job = client.jobs.create(SPEC)
        assert client.jobs.cancel(job.id).status == "cancelled"
        with pytest.raises(errors.JobFailedError):
            client.jobs.wait(job.id)


def test_list_pages_through_every_job_once(service):
    with _client(service) as client:
        created = [client.jobs.create(SPEC).id for _ in range(5)]
        listed = [job.id for job in client.jobs.list(limit=2)]
    assert listed == created
    assert len(service.seen("GET", "/v1/jobs")) == 3


def test_metrics_are_numpy_arrays_with_nan_for_missing(service):
    with _client(service) as client:
        metrics = client.jobs.metrics("job_1", ["loss"])
    assert list(metrics) == ["loss"]
    steps, values = metrics["loss"]
    assert steps.dtype == np.int64 and steps.tolist() == [0, 1, 2]
    assert values[:2].tolist() == [1.0, 0.5] and np.isnan(values[2])


def test_npy_artifact_comes_back_as_an_array(service):
    with _client(service) as client:
        kernel = client.jobs.artifact("job_1", "kernel_init.npy")
    np.testing.assert_array_equal(kernel, np.arange(6.0).reshape(2, 3))


def test_environment_supplies_url_and_api_key(service, monkeypatch):
    monkeypatch.setenv("NTKLAB_URL", service.url)
    monkeypatch.setenv("NTKLAB_API_KEY", "sk-test")
    with Client() as client:
        client.jobs.create(SPEC)
    ((_, _, headers, _),) = service.seen("POST", "/v1/jobs")
    assert headers["x-api-key"] == "sk-test"


def test_with_options_overrides_without_touching_the_original(service):
    service.inject("retrieve", Fault(status=503), Fault(status=503))
    with _client(service, max_retries=2) as client:
        strict = client.with_options(max_retries=0, api_key="other")
        with pytest.raises(errors.InternalServerError):
            strict.jobs.retrieve("job_1")
        with pytest.raises(errors.NotFoundError):
            client.jobs.retrieve("job_1")
    first, second, third = service.seen("GET", "/v1/jobs/job_1")
    assert first[2]["x-api-key"] == "other" and "x-api-key" not in third[2]


# --------------------------------------------------------------------------- async twin


def test_async_503_then_success_makes_exactly_one_job(service):
    service.inject("create", Fault(status=503, after_commit=True))

    async def scenario():
        async with AsyncClient(base_url=service.url) as client:
            return await client.jobs.create(SPEC)

    job = asyncio.run(scenario())
    keys = {headers["idempotency-key"] for _, _, headers, _ in service.seen("POST", "/v1/jobs")}
    assert len(keys) == 1 and list(service.jobs) == [job.id]


def test_async_retry_after_is_honoured(service):
    service.inject("create", Fault(status=429, retry_after="1"))

    async def scenario():
        async with AsyncClient(base_url=service.url) as client:
            await client.jobs.create(SPEC)

    asyncio.run(scenario())
    first, second = service.seen("POST", "/v1/jobs")
    assert second[3] - first[3] >= 1.0


def test_async_422_raises_at_once(service):
    async def scenario():
        async with AsyncClient(base_url=service.url, max_retries=5) as client:
            await client.jobs.create({"model": {"hidden": [0]}})

    with pytest.raises(errors.UnprocessableEntityError) as caught:
        asyncio.run(scenario())
    assert "model.hidden.0" in caught.value.fields
    assert len(service.seen("POST", "/v1/jobs")) == 1


def test_async_timeout_and_wait_and_list(service):
    service.inject("retrieve", Fault(delay_s=1.0))

    async def scenario():
        async with AsyncClient(base_url=service.url, timeout=0.2, max_retries=0) as client:
            with pytest.raises(errors.APITimeoutError):
                await client.jobs.retrieve("job_1")
            job = await client.jobs.create(SPEC)
            done = await client.with_options(timeout=5).jobs.wait(job.id, poll_interval=0.01)
            listed = [j.id async for j in client.jobs.list(limit=1)]
            return job, done, listed

    job, done, listed = asyncio.run(scenario())
    assert done.status == "succeeded" and listed == [job.id]


def test_async_connection_refused():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def scenario():
        async with AsyncClient(base_url=f"http://127.0.0.1:{port}", max_retries=1) as client:
            await client.jobs.retrieve("job_1")

    with pytest.raises(errors.APIConnectionError):
        asyncio.run(scenario())
