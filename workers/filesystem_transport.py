"""The embedded broker's transport: kombu's filesystem transport with a blocking wait cut into short slices.

Celery's worker drives a transport without asynchronous I/O (this one) through its synchronous
loop, which calls `drain_events(timeout=2.0)` and looks for a shutdown request only between
calls, plus one more call after it: an idle worker took 4–5 s to stop on SIGTERM (Ctrl-C on
`ntklab up`, every embedded stack the tests and `make demo` stop). Here a wait with a timeout
returns (socket.timeout, which the loop expects) after at most `DRAIN_SLICE_S`, so a warm
shutdown of an idle worker takes a few slices; a running job is still finished first.
Selected by `make_celery` for `filesystem://` broker URLs; a wait without a timeout is unchanged.
"""

from __future__ import annotations

from kombu.transport import filesystem

DRAIN_SLICE_S = 0.1


class Transport(filesystem.Transport):
    def drain_events(self, connection, timeout=None):
        if timeout is not None:
            timeout = min(timeout, DRAIN_SLICE_S)
        return super().drain_events(connection, timeout=timeout)
