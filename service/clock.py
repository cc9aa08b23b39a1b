"""The clock that time-limited state in the API reads: seconds as a float, injected so tests can advance it.

`Clock` is any zero-argument callable returning seconds; only differences between its readings
matter, so `time.monotonic` (the default) serves where no wall time is compared.
tests/fake_clock.py has the FakeClock the tests advance instead of sleeping.
"""

from __future__ import annotations

from collections.abc import Callable

Clock = Callable[[], float]
