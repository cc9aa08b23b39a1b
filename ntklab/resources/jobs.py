"""`client.jobs`: create, follow and read one training run and its diagnostics."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from pydantic import ConfigDict, PrivateAttr

from api_schemas import resources as wire
from api_schemas.resources import ArtifactInfo
from api_schemas.series import JOB_FIGURE
from ntklab._http import poll_delay
from ntklab.errors import JobFailedError, WaitTimeoutError
from ntklab.progress import ProgressBar
from ntklab.specs import SpecLike, to_body

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ntklab.client import AsyncClient, Client

FINISHED = ("succeeded", "failed", "cancelled")
PLOTTED_SERIES = JOB_FIGURE


class Job(wire.Job):
    """A job as the service reports it (api_schemas.resources.Job); `plot()` draws its
    ΔK(t), loss and weight change. Fields a newer service adds are kept, not refused. `spec` and `summary`
    are plain dicts, as sent (the wire types them as JobSpec and JobSummary), so they index as they print."""

    model_config = ConfigDict(extra="allow")

    spec: dict[str, Any] | None
    summary: dict[str, Any] | None

    _client: Client | None = PrivateAttr(default=None)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def plot(self, path: str | None = None, *, metrics: dict[str, MetricSeries] | None = None) -> Figure:
        """One figure of ΔK(t), loss and ‖w−w₀‖ against step, lines on log axes where the data span decades; saved to
        `path` (.png, .svg, .pdf) if given, a .png with a .pdf and an .svg beside it.

        The series are fetched through the client that returned this job, unless `metrics`
        (the result of `jobs.metrics`) is passed, as it must be for jobs of an AsyncClient.
        """
        from ntklab.plots import job_figure

        if metrics is None:
            if self._client is None:
                raise TypeError("this job is not bound to a synchronous Client: pass metrics=")
            metrics = self._client.jobs.metrics(self.id, PLOTTED_SERIES)
        return job_figure(metrics, title=self.name or self.id, path=path)


class JobDryRun(wire.JobDryRun):
    """What `jobs.estimate` returns (api_schemas.resources.JobDryRun): the job's memory, FLOPs and seconds per
    phase at the service's rates (`rates`, with their source) and the caps it is within, and `by_worker_class`: the
    same phases calibrated by each worker class's measured throughput (empty before any job succeeded); nothing
    was submitted."""

    model_config = ConfigDict(extra="allow")


class JobUpdate(wire.JobUpdate):
    """What `jobs.updates` returns (api_schemas.resources.JobUpdate): the job without its spec, and the
    metric points recorded after step `since_step` (all of them when it was None) as `{name: Series}`."""

    model_config = ConfigDict(extra="allow")

    job: Job

    def series(self, *, as_frame: bool = False) -> Any:
        """`metrics` as `jobs.metrics` returns them: {name: MetricSeries} of numpy arrays, or a DataFrame."""
        return parse_metrics({name: points.model_dump() for name, points in self.metrics.items()}, as_frame)


class MetricSeries(NamedTuple):
    """values[i] was recorded at training step steps[i]; missing (non-finite) values are NaN."""

    step: np.ndarray
    value: np.ndarray


JobRef = str | Job


def job_id(job: JobRef) -> str:
    return job.id if isinstance(job, Job) else job


def parse_metrics(payload: dict[str, Any], as_frame: bool) -> Any:
    """{name: {step, value}} → {name: MetricSeries}, or a step-indexed pandas DataFrame."""
    series = {
        name: MetricSeries(
            np.asarray(points["step"], dtype=np.int64),
            np.asarray([np.nan if v is None else v for v in points["value"]], dtype=np.float64),
        )
        for name, points in payload.items()
    }
    if not as_frame:
        return series
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError("metrics(as_frame=True) needs pandas: pip install pandas") from exc
    columns = [pd.Series(s.value, index=pd.Index(s.step, name="step"), name=name) for name, s in series.items()]
    return pd.concat(columns, axis=1) if columns else pd.DataFrame(index=pd.Index([], name="step"))


def decode_artifact(name: str, content: bytes) -> Any:
    """.npy → ndarray, .npz → {name: ndarray}, .json → parsed JSON, anything else → bytes."""
    if name.endswith(".npy"):
        return np.load(io.BytesIO(content), allow_pickle=False)
    if name.endswith(".npz"):
        with np.load(io.BytesIO(content), allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    if name.endswith(".json"):
        return json.loads(content)
    return content


def _list_params(
    status: str | Sequence[str] | None, tag: str | None, sweep_id: str | None, limit: int | None
) -> dict[str, Any]:
    return {"status": status, "tag": tag, "sweep_id": sweep_id, "limit": limit}


def _names(names: str | Sequence[str] | None) -> str | None:
    if names is None or isinstance(names, str):
        return names
    return ",".join(names)


def _series_params(names: str | Sequence[str] | None, since_step: int | None) -> dict[str, Any]:
    return {"names": _names(names), "since_step": since_step}


def _idempotency(key: str | None) -> dict[str, str] | None:
    return {"Idempotency-Key": key} if key else None


DRY_RUN = {"dry_run": "true"}


class Jobs:
    def __init__(self, client: Client) -> None:
        self._client = client

    def _job(self, data: dict) -> Job:
        """A Job bound to this client (so its own methods can call the service)."""
        job = Job.model_validate(data)
        job._client = self._client
        return job

    def create(self, spec: SpecLike | None = None, /, *, idempotency_key: str | None = None, **fields: Any) -> Job:
        """Submit a job: `spec` is a JobSpec, a dict or a .json/.yaml path; `fields` override its keys."""
        response = self._client._transport.request(
            "POST", "/v1/jobs", json=to_body(spec, **fields), headers=_idempotency(idempotency_key)
        )
        return self._job(response.json())

    def estimate(self, spec: SpecLike | None = None, /, **fields: Any) -> JobDryRun:
        """What `create` with these arguments would cost, from the service's dry run (POST /v1/jobs?dry_run=true):
        the same validation and caps (an invalid or over-cap spec raises as `create` would), nothing submitted."""
        response = self._client._transport.request("POST", "/v1/jobs", json=to_body(spec, **fields), params=DRY_RUN)
        return JobDryRun.model_validate(response.json())

    def retrieve(self, job: JobRef) -> Job:
        return self._job(self._client._transport.request("GET", f"/v1/jobs/{job_id(job)}").json())

    def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        tag: str | None = None,
        sweep_id: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Job]:
        """Every matching job (any of several statuses), newest first, fetching pages of `limit` as it goes."""
        params = _list_params(status, tag, sweep_id, limit)
        while True:
            page = self._client._transport.request("GET", "/v1/jobs", params=params).json()
            for item in page["data"]:
                yield self._job(item)
            if not page.get("has_more") or not page.get("next"):
                return
            params = {**params, "after": page["next"]}

    def cancel(self, job: JobRef) -> Job:
        """Ask the worker to stop the job; it ends `cancelled` within seconds (docs/operations.md)."""
        return self._job(self._client._transport.request("POST", f"/v1/jobs/{job_id(job)}/cancel").json())

    def delete(self, job: JobRef) -> None:
        self._client._transport.request("DELETE", f"/v1/jobs/{job_id(job)}")

    def wait(
        self, job: JobRef, *, timeout: float | None = None, poll_interval: float = 1.0, progress: bool = True
    ) -> Job:
        """Poll until the job finishes; return it if it succeeded, raise JobFailedError otherwise.

        Polls are at least `poll_interval` and at least the service's `Retry-After` apart.
        A progress bar (step/total, phase, ETA) is drawn on stderr when it is a terminal.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with ProgressBar(job_id(job), enabled=progress) as bar:
            while True:
                response = self._client._transport.request("GET", f"/v1/jobs/{job_id(job)}")
                current = self._job(response.json())
                bar.update(current.progress.step, current.progress.total, current.progress.phase, current.progress.eta_s)
                if current.finished:
                    return _outcome(current)
                delay = poll_delay(response, poll_interval)
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise WaitTimeoutError(current, timeout)
                time.sleep(delay)

    def metrics(
        self,
        job: JobRef,
        names: str | Sequence[str] | None = None,
        *,
        since_step: int | None = None,
        as_frame: bool = False,
    ) -> Any:
        """Recorded series by name (all when `names` is None) as numpy arrays or a DataFrame.

        With `since_step`, only the points with a greater step (a series without any is left out); how to
        append them to series already held: docs/sdk.md, "Following a running job".
        """
        response = self._client._transport.request(
            "GET", f"/v1/jobs/{job_id(job)}/metrics", params=_series_params(names, since_step)
        )
        return parse_metrics(response.json(), as_frame)

    def updates(
        self, job: JobRef, names: str | Sequence[str] | None = None, *, since_step: int | None = None
    ) -> JobUpdate:
        """The job (without its spec) and its metric points with a step greater than `since_step` (all when
        None), in one request: what a loop that follows a running job asks for each interval. A new attempt
        (`job.attempts` changed) records its series from step 0 again, and a finished job's series may be
        recomputed: then read again without `since_step` (docs/sdk.md, "Following a running job")."""
        response = self._client._transport.request(
            "GET", f"/v1/jobs/{job_id(job)}/updates", params=_series_params(names, since_step)
        )
        update = JobUpdate.model_validate(response.json())
        update.job._client = self._client
        return update

    def artifacts(self, job: JobRef) -> list[ArtifactInfo]:
        page = self._client._transport.request("GET", f"/v1/jobs/{job_id(job)}/artifacts").json()
        return [ArtifactInfo.model_validate(item) for item in page["data"]]

    def download(self, job: JobRef, name: str) -> bytes:
        """The artifact's raw bytes."""
        return self._client._transport.request("GET", f"/v1/jobs/{job_id(job)}/artifacts/{name}").content

    def artifact(self, job: JobRef, name: str) -> Any:
        """The artifact decoded: a kernel .npy is an (n·O)×(n·O) ndarray, a .json a dict."""
        return decode_artifact(name, self.download(job, name))


class AsyncJobs:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(
        self, spec: SpecLike | None = None, /, *, idempotency_key: str | None = None, **fields: Any
    ) -> Job:
        response = await self._client._transport.request(
            "POST", "/v1/jobs", json=to_body(spec, **fields), headers=_idempotency(idempotency_key)
        )
        return Job.model_validate(response.json())

    async def estimate(self, spec: SpecLike | None = None, /, **fields: Any) -> JobDryRun:
        response = await self._client._transport.request(
            "POST", "/v1/jobs", json=to_body(spec, **fields), params=DRY_RUN
        )
        return JobDryRun.model_validate(response.json())

    async def retrieve(self, job: JobRef) -> Job:
        response = await self._client._transport.request("GET", f"/v1/jobs/{job_id(job)}")
        return Job.model_validate(response.json())

    async def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        tag: str | None = None,
        sweep_id: str | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[Job]:
        params = _list_params(status, tag, sweep_id, limit)
        while True:
            page = (await self._client._transport.request("GET", "/v1/jobs", params=params)).json()
            for item in page["data"]:
                yield Job.model_validate(item)
            if not page.get("has_more") or not page.get("next"):
                return
            params = {**params, "after": page["next"]}

    async def cancel(self, job: JobRef) -> Job:
        response = await self._client._transport.request("POST", f"/v1/jobs/{job_id(job)}/cancel")
        return Job.model_validate(response.json())

    async def delete(self, job: JobRef) -> None:
        await self._client._transport.request("DELETE", f"/v1/jobs/{job_id(job)}")

    async def wait(
        self, job: JobRef, *, timeout: float | None = None, poll_interval: float = 1.0, progress: bool = True
    ) -> Job:
        deadline = None if timeout is None else time.monotonic() + timeout
        with ProgressBar(job_id(job), enabled=progress) as bar:
            while True:
                response = await self._client._transport.request("GET", f"/v1/jobs/{job_id(job)}")
                current = Job.model_validate(response.json())
                bar.update(current.progress.step, current.progress.total, current.progress.phase, current.progress.eta_s)
                if current.finished:
                    return _outcome(current)
                delay = poll_delay(response, poll_interval)
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise WaitTimeoutError(current, timeout)
                await asyncio.sleep(delay)

    async def metrics(
        self,
        job: JobRef,
        names: str | Sequence[str] | None = None,
        *,
        since_step: int | None = None,
        as_frame: bool = False,
    ) -> Any:
        response = await self._client._transport.request(
            "GET", f"/v1/jobs/{job_id(job)}/metrics", params=_series_params(names, since_step)
        )
        return parse_metrics(response.json(), as_frame)

    async def updates(
        self, job: JobRef, names: str | Sequence[str] | None = None, *, since_step: int | None = None
    ) -> JobUpdate:
        response = await self._client._transport.request(
            "GET", f"/v1/jobs/{job_id(job)}/updates", params=_series_params(names, since_step)
        )
        return JobUpdate.model_validate(response.json())

    async def artifacts(self, job: JobRef) -> list[ArtifactInfo]:
        page = (await self._client._transport.request("GET", f"/v1/jobs/{job_id(job)}/artifacts")).json()
        return [ArtifactInfo.model_validate(item) for item in page["data"]]

    async def download(self, job: JobRef, name: str) -> bytes:
        return (await self._client._transport.request("GET", f"/v1/jobs/{job_id(job)}/artifacts/{name}")).content

    async def artifact(self, job: JobRef, name: str) -> Any:
        return decode_artifact(name, await self.download(job, name))


def _outcome(job: Job) -> Job:
    if job.status != "succeeded":
        raise JobFailedError(job)
    return job
