"""`client.sweeps`: a grid of jobs over dotted spec paths, its table and its power-law fits."""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import ConfigDict, Field

from ntklab._http import Deadline, poll_delay
from ntklab._resource import AsyncAPIResource, SyncAPIResource
from ntklab.api_schemas import sweeps as wire
from ntklab.errors import WaitTimeoutError
from ntklab.pagination import AsyncPage, AsyncPaginator, Page
from ntklab.progress import ProgressBar
from ntklab.specs import SpecLike, to_body

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SWEEP_FINISHED = ("succeeded", "failed", "cancelled", "partial")


class Sweep(wire.Sweep):
    """A sweep as the service reports it (ntklab.api_schemas.sweeps.Sweep): status, counts, table, fits.

    `spec` (the wire's SweepSpec) and `fits` are plain dicts, so they print and tabulate as they are;
    a fit has y, x, group_by, group, slope, slope_low, slope_high, intercept, r_squared, points,
    verdict, group_label, theory_slope, x_label, y_label.
    """

    model_config = ConfigDict(extra="allow")

    spec: dict[str, Any]  # type: ignore[assignment]  # plain dicts, on purpose
    fits: list[dict[str, Any]] = Field(default_factory=list)  # type: ignore[assignment]  # plain dicts, on purpose

    @property
    def finished(self) -> bool:
        return self.status in SWEEP_FINISHED

    def rows(self) -> list[dict[str, Any]]:
        """The table flattened: one dict per job with job_id, status, grid values and summary."""
        return [{"job_id": row.job_id, "status": row.status, **row.values, **row.summary} for row in self.table]

    def plot(self, x: str | None = None, y: str | None = None, *, path: str | None = None) -> Figure:
        """The service's fits against x on log–log axes, drawn as GET /v1/sweeps/{id}/plot draws them: one
        panel per y, per group its seed-averaged points ± std, its line y = e^intercept · x^slope named by
        the group with slope and R², and the theory's slope dashed where the fit carries one; titled in
        words for a preset's sweep ("Figure 1 (left): ΔK vs width, … (cpu scale)"), else with the sweep's name.

        Nothing is re-fitted here: the figure is `fits` as the service returned them. x defaults to
        the first fit's, y to every y fitted against it; a pair the sweep asked no fit for raises
        ValueError naming the fits it has, and `client.sweeps.plot_image(id, x=..., y=...)` has the
        service fit and draw any pair. Saved to `path` (.png, .svg, .pdf) if given, a
        .png with a .pdf and an .svg beside it.
        """
        from ntklab.analysis.figure_titles import figure_title
        from ntklab.plots import sweep_figure

        return sweep_figure(self.fits, x=x, y=y, title=figure_title(self.name, self.tags) or self.id, path=path)


class SweepSummary(wire.SweepSummary):
    """A sweep as `client.sweeps.list()` yields it (ntklab.api_schemas.sweeps.SweepSummary): status, counts and
    grid axes, without its spec, table or fits (`client.sweeps.retrieve(summary.id)` has those)."""

    model_config = ConfigDict(extra="allow")

    @property
    def finished(self) -> bool:
        return self.status in SWEEP_FINISHED


def _list_params(status: str | Sequence[str] | None, tag: str | None, limit: int | None) -> dict[str, Any]:
    return {"status": status, "tag": tag, "limit": limit}


def idempotency_header(key: str | None) -> dict[str, str] | None:
    """The Idempotency-Key header for a key chosen by the caller; None lets the transport make one per call."""
    return {"Idempotency-Key": key} if key else None


def _progress(bar: ProgressBar, sweep: Sweep) -> None:
    done = sum(count for status, count in sweep.counts.items() if status in SWEEP_FINISHED)
    bar.update(done, sweep.total, sweep.status)


def _as_frame(rows: list[dict[str, Any]]) -> Any:
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError("table(as_frame=True) needs pandas: pip install pandas") from exc
    return pd.DataFrame(rows)


def _rows_cursor(sweep: Sweep) -> str | None:
    """The `after` of the table's next page, None on its last."""
    return sweep.next if sweep.has_more else None


class Sweeps(SyncAPIResource):
    def create(self, spec: SpecLike | None = None, /, *, idempotency_key: str | None = None, **fields: Any) -> Sweep:
        """Submit a sweep {name, base, grid, fits} given as a model, a dict or a .json/.yaml path.

        The call's retries reuse one Idempotency-Key (yours, or one made for the call), so a
        retried create answers the sweep the first attempt made instead of making another."""
        return self._post(
            "/v1/sweeps", cast_to=Sweep, body=to_body(spec, **fields), headers=idempotency_header(idempotency_key)
        )

    def retrieve(self, sweep_id: str, *, limit: int | None = None, after: str | None = None) -> Sweep:
        """The sweep with one page of its table: `limit` rows (default: the service's page size) after `after`."""
        return self._get(f"/v1/sweeps/{sweep_id}", cast_to=Sweep, params={"limit": limit, "after": after})

    def list(
        self, *, status: str | Sequence[str] | None = None, tag: str | None = None, limit: int | None = None
    ) -> Page[SweepSummary]:
        """The first page of matching sweeps (any of several statuses; a tag of the sweep itself), newest first;
        iterating it yields every match, fetching pages of `limit` as it goes."""
        return self._get_page("/v1/sweeps", item=SweepSummary.model_validate, params=_list_params(status, tag, limit))

    def iter_rows(self, sweep_id: str, *, page_size: int | None = None) -> Page[dict[str, Any]]:
        """The first page of the sweep's table (`Sweep.rows()` form); iterating it yields every row, a page at a time."""
        return self._rows(sweep_id, page_size, None)

    def _rows(self, sweep_id: str, page_size: int | None, after: str | None) -> Page[dict[str, Any]]:
        sweep = self.retrieve(sweep_id, limit=page_size, after=after)
        return Page(sweep.rows(), _rows_cursor(sweep), lambda cursor: self._rows(sweep_id, page_size, cursor))

    def cancel(self, sweep_id: str) -> Sweep:
        return self._post(f"/v1/sweeps/{sweep_id}/cancel", cast_to=Sweep)

    def table(self, sweep_id: str, *, as_frame: bool = False) -> Any:
        """All rows of the sweep's table, every page read."""
        rows = list(self.iter_rows(sweep_id))
        return _as_frame(rows) if as_frame else rows

    def fits(self, sweep_id: str) -> builtins.list[dict[str, Any]]:
        return self.retrieve(sweep_id).fits

    def plot_image(self, sweep_id: str, *, x: str | None = None, y: str | None = None, format: str = "png") -> bytes:
        """The service's own rendering of the log–log plot, as PNG or SVG bytes; x and y default to the first fit's."""
        return self._get(f"/v1/sweeps/{sweep_id}/plot", cast_to=bytes, params={"x": x, "y": y, "format": format})

    def wait(
        self, sweep_id: str, *, timeout: float | None = None, poll_interval: float = 2.0, progress: bool = True
    ) -> Sweep:
        """Poll until every job of the sweep has finished; the bar counts finished jobs."""
        deadline = Deadline(timeout)
        with ProgressBar(sweep_id, enabled=progress) as bar:
            while True:
                response = self._get(f"/v1/sweeps/{sweep_id}", cast_to=httpx.Response)
                sweep = Sweep.model_validate(response.json())
                _progress(bar, sweep)
                if sweep.finished:
                    return sweep
                delay = poll_delay(response, poll_interval)
                if not deadline.allows(delay):
                    raise WaitTimeoutError(sweep, deadline.seconds)
                time.sleep(delay)


class AsyncSweeps(AsyncAPIResource):
    """`Sweeps` for an AsyncClient: the same methods, awaited; `list` and `iter_rows` are AsyncPaginators."""

    async def create(
        self, spec: SpecLike | None = None, /, *, idempotency_key: str | None = None, **fields: Any
    ) -> Sweep:
        return await self._post(
            "/v1/sweeps", cast_to=Sweep, body=to_body(spec, **fields), headers=idempotency_header(idempotency_key)
        )

    async def retrieve(self, sweep_id: str, *, limit: int | None = None, after: str | None = None) -> Sweep:
        return await self._get(f"/v1/sweeps/{sweep_id}", cast_to=Sweep, params={"limit": limit, "after": after})

    def list(
        self, *, status: str | Sequence[str] | None = None, tag: str | None = None, limit: int | None = None
    ) -> AsyncPaginator[SweepSummary]:
        return self._list("/v1/sweeps", item=SweepSummary.model_validate, params=_list_params(status, tag, limit))

    def iter_rows(self, sweep_id: str, *, page_size: int | None = None) -> AsyncPaginator[dict[str, Any]]:
        return AsyncPaginator(lambda: self._rows(sweep_id, page_size, None))

    async def _rows(self, sweep_id: str, page_size: int | None, after: str | None) -> AsyncPage[dict[str, Any]]:
        sweep = await self.retrieve(sweep_id, limit=page_size, after=after)

        async def fetch(cursor: str) -> AsyncPage[dict[str, Any]]:
            return await self._rows(sweep_id, page_size, cursor)

        return AsyncPage(sweep.rows(), _rows_cursor(sweep), fetch)

    async def cancel(self, sweep_id: str) -> Sweep:
        return await self._post(f"/v1/sweeps/{sweep_id}/cancel", cast_to=Sweep)

    async def table(self, sweep_id: str, *, as_frame: bool = False) -> Any:
        rows = [row async for row in self.iter_rows(sweep_id)]
        return _as_frame(rows) if as_frame else rows

    async def fits(self, sweep_id: str) -> builtins.list[dict[str, Any]]:
        return (await self.retrieve(sweep_id)).fits

    async def plot_image(
        self, sweep_id: str, *, x: str | None = None, y: str | None = None, format: str = "png"
    ) -> bytes:
        return await self._get(f"/v1/sweeps/{sweep_id}/plot", cast_to=bytes, params={"x": x, "y": y, "format": format})

    async def wait(
        self, sweep_id: str, *, timeout: float | None = None, poll_interval: float = 2.0, progress: bool = True
    ) -> Sweep:
        deadline = Deadline(timeout)
        with ProgressBar(sweep_id, enabled=progress) as bar:
            while True:
                response = await self._get(f"/v1/sweeps/{sweep_id}", cast_to=httpx.Response)
                sweep = Sweep.model_validate(response.json())
                _progress(bar, sweep)
                if sweep.finished:
                    return sweep
                delay = poll_delay(response, poll_interval)
                if not deadline.allows(delay):
                    raise WaitTimeoutError(sweep, deadline.seconds)
                await asyncio.sleep(delay)
