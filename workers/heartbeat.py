"""A background thread that keeps a running job's row alive and current.

The engine calls `progress`, `metric` and `cancelled` from its training loop; those calls
only touch memory. Every tick (at most twice a second) the thread writes one transaction:
heartbeat_at, the latest progress if it changed, and the buffered metric points as
`MetricChunk` rows once `metrics_flush_interval_s` has passed. The same UPDATE returns
`cancel_requested`, so a cancel is seen within a tick even during a long phase. If the
row is no longer ours (requeued by the reaper) `cancelled()` turns True and the job stops.

The engine stops at its next checkpoint (a training step, a kernel chunk, a batch of
Hessian-vector products: engine/callbacks.py). A job still running `cancel_grace_s`
after the thread saw its cancel (stuck in one long native call) is handed to `overdue()`,
which stores it cancelled and replaces the process (workers/tasks.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ntklab.engine.callbacks import Progress
from ntklab.engine.result import finite_or_none
from ntklab.store.job_store import ChunkRow, Claim, JobStore, LostJob

log = logging.getLogger(__name__)

MAX_TICK_S = 0.5
MAX_CHUNK_POINTS = 5000


class SeriesBuffer:
    """Points recorded but not yet written, and what each series already has in SQL."""

    def __init__(self):
        self._pending: dict[str, tuple[list[int], list[float | None]]] = {}
        self.written_steps: dict[str, list[int]] = {}
        self.next_chunk: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, name: str, step: int, value: float | None) -> None:
        with self._lock:
            steps, values = self._pending.setdefault(name, ([], []))
            steps.append(int(step))
            values.append(value)

    def take(self) -> list[ChunkRow]:
        """Pending points as chunk rows with consecutive chunk numbers per series (≤ MAX_CHUNK_POINTS each)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        rows = []
        for name, (steps, values) in pending.items():
            for start in range(0, len(steps), MAX_CHUNK_POINTS):
                rows.append(
                    self._row(name, steps[start : start + MAX_CHUNK_POINTS], values[start : start + MAX_CHUNK_POINTS])
                )
        return rows

    def give_back(self, rows: list[ChunkRow]) -> None:
        """Undo `take` after a failed write: the rows' points go back in front of newer ones."""
        with self._lock:
            for row in reversed(rows):
                self.next_chunk[row.name] -= 1
                del self.written_steps[row.name][-len(row.steps) :]
                steps, values = self._pending.setdefault(row.name, ([], []))
                steps[:0], values[:0] = row.steps, row.values

    def _row(self, name: str, steps: list[int], values: list[float | None]) -> ChunkRow:
        chunk = self.next_chunk.get(name, 0)
        self.next_chunk[name] = chunk + 1
        self.written_steps.setdefault(name, []).extend(steps)
        return ChunkRow(name=name, chunk=chunk, steps=steps, values=values)


class JobReporter:
    """The engine's Callbacks for one claimed job, plus the thread that writes them out."""

    def __init__(
        self,
        store: JobStore,
        claim: Claim,
        *,
        heartbeat_interval_s: float,
        flush_interval_s: float,
        cancel_grace_s: float | None = None,
        overdue: Callable[[], None] | None = None,
    ):
        self.store, self.claim = store, claim
        self.tick_s = min(MAX_TICK_S, heartbeat_interval_s)
        self.cancel_grace_s, self.overdue = cancel_grace_s, overdue
        self.cancel_seen_at: float | None = None
        self.gave_up = False
        self.flush_interval_s = flush_interval_s
        self.series = SeriesBuffer()
        self.lost = False
        self._cancel = threading.Event()
        self._stop = threading.Event()
        self._progress: Progress | None = None
        self._written_progress: Progress | None = None
        self._last_flush = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{claim.job_id}", daemon=True)

    # ---- Callbacks
    def progress(self, progress: Progress) -> None:
        self._progress = progress

    def metric(self, name: str, step: int, value: float | None) -> None:
        self.series.add(name, step, value)

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def last_progress(self) -> dict | None:
        return _progress_columns(self._progress, None)

    # ---- the thread
    def __enter__(self) -> JobReporter:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.tick()

    def tick(self) -> None:
        progress = self._progress
        flush_due = time.monotonic() - self._last_flush >= self.flush_interval_s
        rows = self.series.take() if flush_due else []
        try:
            cancel = self.store.report(self.claim, _progress_columns(progress, self._written_progress), rows)
        except LostJob:
            log.warning("job %s attempt %d: row taken over, stopping", self.claim.job_id, self.claim.attempt)
            self.lost = True
            self._cancel.set()
            return
        except Exception as error:
            log.warning("job %s: report failed, retrying next tick: %s", self.claim.job_id, error)
            self.series.give_back(rows)
            self._enforce_cancel()
            return
        self._written_progress = progress
        if flush_due:
            self._last_flush = time.monotonic()
        if cancel:
            self._cancel.set()
            if self.cancel_seen_at is None:
                self.cancel_seen_at = time.monotonic()
        self._enforce_cancel()

    def _enforce_cancel(self) -> None:
        """Hand the job to `overdue`, once, when it has run cancel_grace_s past the cancel this thread saw."""
        if self.cancel_seen_at is None or self.overdue is None or self.cancel_grace_s is None or self.gave_up:
            return
        if time.monotonic() - self.cancel_seen_at >= self.cancel_grace_s and not self._stop.is_set():
            self.gave_up = True
            log.error(
                "job %s: still running %.1f s after its cancel; giving up on its process",
                self.claim.job_id,
                time.monotonic() - self.cancel_seen_at,
            )
            self.overdue()


def _progress_columns(progress: Progress | None, written: Progress | None) -> dict | None:
    if progress is None or progress == written:
        return None
    return {
        "progress_step": progress.step,
        "progress_total": progress.total,
        "progress_phase": progress.phase[:32],
        "progress_eta_s": finite_or_none(progress.eta_s),
    }
