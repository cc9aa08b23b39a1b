"""`client.jobs`: create, follow and read one training run and its diagnostics."""

from __future__ import annotations

import asyncio
import builtins
import io
import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import httpx
import numpy as np
from pydantic import ConfigDict, PrivateAttr

from ntklab._download import PathLike, async_download_to, download_to
from ntklab._http import Deadline, poll_delay
from ntklab._resource import AsyncAPIResource, SyncAPIResource
from ntklab.api_schemas import resources as wire
from ntklab.api_schemas.resources import ArtifactInfo
from ntklab.api_schemas.series import JOB_FIGURE
from ntklab.errors import JobFailedError, WaitTimeoutError
from ntklab.pagination import AsyncPaginator, Page
from ntklab.progress import ProgressBar
from ntklab.specs import SpecLike, to_body

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ntklab.client import AsyncClient, Client

FINISHED = ("succeeded", "failed", "cancelled")
PLOTTED_SERIES = JOB_FIGURE


class Job(wire.Job):
    """A job as the service reports it (ntklab.api_schemas.resources.Job); `plot()` draws its
    ΔK(t), loss and weight change. Fields a newer service adds are kept, not refused. `spec` and `summary`
    are plain dicts, as sent (the wire types them as JobSpec and JobSummary), so they index as they print."""

    model_config = ConfigDict(extra="allow")

    spec: dict[str, Any] | None  # type: ignore[assignment]  # plain dicts, on purpose
    summary: dict[str, Any] | None  # type: ignore[assignment]  # plain dicts, on purpose

    _client: Client | None = PrivateAttr(default=None)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def plot(self, path: str | None = None, *, metrics: Mapping[str, MetricSeries] | None = None) -> Figure:
        """One figure of ΔK(t), loss and ‖w−w₀‖ against step, lines on log axes where the data span decades; saved to
        `path` (.png, .svg, .pdf) if given, a .png with a .pdf and an .svg beside it.

        The series are fetched through the client that returned this job, unless `metrics`
        (the result of `jobs.metrics`) is passed, as it must be for a job made here (`Job.model_validate`).
        """
        if metrics is None:
            if self._client is None:
                raise TypeError("this job is bound to no client: pass metrics=")
            metrics = self._client.jobs.metrics(self.id, PLOTTED_SERIES)
        return _figure(self, metrics, path)


class AsyncJob(Job):
    """A job of an `AsyncClient`: a `Job` whose `plot()` is awaited (it fetches the series through that client)."""

    _async_client: AsyncClient | None = PrivateAttr(default=None)

    async def plot(  # type: ignore[override]  # the same figure, its series fetched by an await
        self, path: str | None = None, *, metrics: Mapping[str, MetricSeries] | None = None
    ) -> Figure:
        """`Job.plot`, its series fetched through the AsyncClient that returned this job."""
        if metrics is None:
            if self._async_client is None:
                raise TypeError("this job is bound to no client: pass metrics=")
            metrics = await self._async_client.jobs.metrics(self.id, PLOTTED_SERIES)
        return _figure(self, metrics, path)


def _figure(job: Job, metrics: Mapping[str, MetricSeries], path: str | None) -> Figure:
    from ntklab.plots import job_figure

    return job_figure(metrics, title=job.name or job.id, path=path)


class JobDryRun(wire.JobDryRun):
    """What `jobs.estimate` returns (ntklab.api_schemas.resources.JobDryRun): the job's memory, FLOPs and seconds per
    phase at the service's rates (`rates`, with their source) and the caps it is within, and `by_worker_class`: the
    same phases calibrated by each worker class's measured throughput (empty before any job succeeded); nothing
    was submitted."""

    model_config = ConfigDict(extra="allow")


class JobUpdate(wire.JobUpdate):
    """What `jobs.updates` returns (ntklab.api_schemas.resources.JobUpdate): the job without its spec, and the
    metric points recorded after step `since_step` (all of them when it was None) as `{name: Series}`."""

    model_config = ConfigDict(extra="allow")

    job: Job

    def series(self, *, as_frame: bool = False) -> Any:
        """`metrics` as `jobs.metrics` returns them: {name: MetricSeries} of numpy arrays, or a DataFrame."""
        return parse_metrics({name: points.model_dump() for name, points in self.metrics.items()}, as_frame)


class AsyncJobUpdate(JobUpdate):
    """`JobUpdate` from an `AsyncClient`: its job is an AsyncJob."""

    job: AsyncJob


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


def _artifacts(page: dict[str, Any]) -> list[ArtifactInfo]:
    return [ArtifactInfo.model_validate(item) for item in page["data"]]


DRY_RUN = {"dry_run": "true"}


class Jobs(SyncAPIResource):
    def _job(self, data: Any) -> Job:
        """A Job bound to this client (so its own methods can call the service)."""
        job = Job.model_validate(data)
        job._client = self._client
        return job

    def create(self, spec: SpecLike | None = None, /, *, idempotency_key: str | None = None, **fields: Any) -> Job:
        """Submit a job: `spec` is a JobSpec, a dict or a .json/.yaml path; `fields` override its keys."""
        body = to_body(spec, **fields)
        return self._job(self._post("/v1/jobs", cast_to=dict, body=body, headers=_idempotency(idempotency_key)))

    def estimate(self, spec: SpecLike | None = None, /, **fields: Any) -> JobDryRun:
        """What `create` with these arguments would cost, from the service's dry run (POST /v1/jobs?dry_run=true):
        the same validation and caps (an invalid or over-cap spec raises as `create` would), nothing submitted."""
        return self._post("/v1/jobs", cast_to=JobDryRun, body=to_body(spec, **fields), params=DRY_RUN)

    def retrieve(self, job: JobRef) -> Job:
        return self._job(self._get(f"/v1/jobs/{job_id(job)}", cast_to=dict))

    def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        tag: str | None = None,
        sweep_id: str | None = None,
        limit: int | None = None,
    ) -> Page[Job]:
        """The first page of matching jobs (any of several statuses), newest first; iterating it yields every
        match, fetching pages of `limit` as it goes."""
        return self._get_page("/v1/jobs", item=self._job, params=_list_params(status, tag, sweep_id, limit))

    def cancel(self, job: JobRef) -> Job:
        """Ask the worker to stop the job; it ends `cancelled` within seconds (docs/operations.md)."""
        return self._job(self._post(f"/v1/jobs/{job_id(job)}/cancel", cast_to=dict))

    def delete(self, job: JobRef) -> None:
        self._delete(f"/v1/jobs/{job_id(job)}")

    def wait(
        self, job: JobRef, *, timeout: float | None = None, poll_interval: float = 1.0, progress: bool = True
    ) -> Job:
        """Poll until the job finishes; return it if it succeeded, raise JobFailedError otherwise.

        Polls are at least `poll_interval` and at least the service's `Retry-After` apart.
        A progress bar (step/total, phase, ETA) is drawn on stderr when it is a terminal.
        """
        deadline = Deadline(timeout)
        with ProgressBar(job_id(job), enabled=progress) as bar:
            while True:
                response = self._get(f"/v1/jobs/{job_id(job)}", cast_to=httpx.Response)
                current = self._job(response.json())
                _show(bar, current)
                if current.finished:
                    return _outcome(current)
                delay = poll_delay(response, poll_interval)
                if not deadline.allows(delay):
                    raise WaitTimeoutError(current, deadline.seconds)
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
        params = _series_params(names, since_step)
        return parse_metrics(self._get(f"/v1/jobs/{job_id(job)}/metrics", cast_to=dict, params=params), as_frame)

    def updates(
        self, job: JobRef, names: str | Sequence[str] | None = None, *, since_step: int | None = None
    ) -> JobUpdate:
        """The job (without its spec) and its metric points with a step greater than `since_step` (all when
        None), in one request: what a loop that follows a running job asks for each interval. A new attempt
        (`job.attempts` changed) records its series from step 0 again, and a finished job's series may be
        recomputed: then read again without `since_step` (docs/sdk.md, "Following a running job")."""
        params = _series_params(names, since_step)
        update = self._get(f"/v1/jobs/{job_id(job)}/updates", cast_to=JobUpdate, params=params)
        update.job._client = self._client
        return update

    def artifacts(self, job: JobRef) -> builtins.list[ArtifactInfo]:
        return _artifacts(self._get(f"/v1/jobs/{job_id(job)}/artifacts", cast_to=dict))

    def download(self, job: JobRef, name: str) -> bytes:
        """The artifact's raw bytes, in memory (`download_to` streams a large one to a file)."""
        return self._get(f"/v1/jobs/{job_id(job)}/artifacts/{name}", cast_to=bytes)

    def download_to(self, job: JobRef, name: str, destination: PathLike) -> int:
        """The artifact streamed into the file `destination`, resumed after a broken connection; its size in bytes."""
        return download_to(self._client.transport, f"/v1/jobs/{job_id(job)}/artifacts/{name}", destination)

    def artifact(self, job: JobRef, name: str) -> Any:
        """The artifact decoded: a kernel .npy is an (n·O)×(n·O) ndarray, a .json a dict."""
        return decode_artifact(name, self.download(job, name))


class AsyncJobs(AsyncAPIResource):
    """`Jobs` for an AsyncClient: the same methods, awaited; jobs are AsyncJobs bound to the client."""

    def _job(self, data: Any) -> AsyncJob:
        job = AsyncJob.model_validate(data)
        job._async_client = self._client
        return job

    async def create(
        self, spec: SpecLike | None = None, /, *, idempotency_key: str | None = None, **fields: Any
    ) -> AsyncJob:
        body = to_body(spec, **fields)
        return self._job(await self._post("/v1/jobs", cast_to=dict, body=body, headers=_idempotency(idempotency_key)))

    async def estimate(self, spec: SpecLike | None = None, /, **fields: Any) -> JobDryRun:
        return await self._post("/v1/jobs", cast_to=JobDryRun, body=to_body(spec, **fields), params=DRY_RUN)

    async def retrieve(self, job: JobRef) -> AsyncJob:
        return self._job(await self._get(f"/v1/jobs/{job_id(job)}", cast_to=dict))

    def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        tag: str | None = None,
        sweep_id: str | None = None,
        limit: int | None = None,
    ) -> AsyncPaginator[AsyncJob]:
        return self._list("/v1/jobs", item=self._job, params=_list_params(status, tag, sweep_id, limit))

    async def cancel(self, job: JobRef) -> AsyncJob:
        return self._job(await self._post(f"/v1/jobs/{job_id(job)}/cancel", cast_to=dict))

    async def delete(self, job: JobRef) -> None:
        await self._delete(f"/v1/jobs/{job_id(job)}")

    async def wait(
        self, job: JobRef, *, timeout: float | None = None, poll_interval: float = 1.0, progress: bool = True
    ) -> AsyncJob:
        deadline = Deadline(timeout)
        with ProgressBar(job_id(job), enabled=progress) as bar:
            while True:
                response = await self._get(f"/v1/jobs/{job_id(job)}", cast_to=httpx.Response)
                current = self._job(response.json())
                _show(bar, current)
                if current.finished:
                    return _outcome(current)
                delay = poll_delay(response, poll_interval)
                if not deadline.allows(delay):
                    raise WaitTimeoutError(current, deadline.seconds)
                await asyncio.sleep(delay)

    async def metrics(
        self,
        job: JobRef,
        names: str | Sequence[str] | None = None,
        *,
        since_step: int | None = None,
        as_frame: bool = False,
    ) -> Any:
        params = _series_params(names, since_step)
        return parse_metrics(await self._get(f"/v1/jobs/{job_id(job)}/metrics", cast_to=dict, params=params), as_frame)

    async def updates(
        self, job: JobRef, names: str | Sequence[str] | None = None, *, since_step: int | None = None
    ) -> AsyncJobUpdate:
        params = _series_params(names, since_step)
        update = await self._get(f"/v1/jobs/{job_id(job)}/updates", cast_to=AsyncJobUpdate, params=params)
        update.job._async_client = self._client
        return update

    async def artifacts(self, job: JobRef) -> builtins.list[ArtifactInfo]:
        return _artifacts(await self._get(f"/v1/jobs/{job_id(job)}/artifacts", cast_to=dict))

    async def download(self, job: JobRef, name: str) -> bytes:
        return await self._get(f"/v1/jobs/{job_id(job)}/artifacts/{name}", cast_to=bytes)

    async def download_to(self, job: JobRef, name: str, destination: PathLike) -> int:
        return await async_download_to(self._client.transport, f"/v1/jobs/{job_id(job)}/artifacts/{name}", destination)

    async def artifact(self, job: JobRef, name: str) -> Any:
        return decode_artifact(name, await self.download(job, name))


def _show(bar: ProgressBar, job: Job) -> None:
    bar.update(job.progress.step, job.progress.total, job.progress.phase, job.progress.eta_s)


JobT = TypeVar("JobT", bound=Job)


def _outcome(job: JobT) -> JobT:
    if job.status != "succeeded":
        raise JobFailedError(job)
    return job
