"""A clock the test moves: ntklab.service.clock.Clock readings that change only when advance() is called."""

from __future__ import annotations

import threading


class FakeClock:
    """Seconds from `start`; advance(s) moves it forward. Thread-safe: the API reads it from its worker threads."""

    def __init__(self, start: float = 1_000.0):
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        assert seconds >= 0, "a clock does not go back"
        with self._lock:
            self._now += seconds
