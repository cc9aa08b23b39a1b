"""The embedded broker's transport: kombu's filesystem transport, with whole messages and a sliced wait.

Whole messages. kombu's `Channel._put` creates `<ms>_<uuid>.<queue>.msg` in the queue folder and
then writes the payload into it; `_get` moves away and reads any file of that name, without the
lock the writer holds. A consumer that lists the folder between the two reads an empty or partial
file: `JSONDecodeError`, which kills the worker ("Unrecoverable error") and loses the message, so
its job hangs queued (seen in `make test`, tests/sdk/test_live.py's embedded stack). Here a
message is written to `<name>.part` (a name `_get` skips: it takes only names ending in
`.<queue>.msg`) and renamed to its final name when whole; a rename within one folder is atomic.
A write that fails removes its `.part`; one a killed producer left is swept when older than an
hour (celery_app.sweep_stale_parts, each time the folders are set up).

Sliced wait. Celery's worker drives a transport without asynchronous I/O (this one) through its
synchronous loop, which calls `drain_events(timeout=2.0)` and looks for a shutdown request only
between calls, plus one more call after it: an idle worker took 4–5 s to stop on SIGTERM (Ctrl-C
on `ntklab up`, every embedded stack the tests and `make demo` stop). Here a wait with a timeout
returns (socket.timeout, which the loop expects) after at most `DRAIN_SLICE_S`, so a warm
shutdown of an idle worker takes a few slices; a running job is still finished first.

Selected by `make_celery` for `filesystem://` broker URLs; a wait without a timeout is unchanged.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

DRAIN_SLICE_S = 0.1


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        """Write `payload` to `<ms>_<uuid>.<queue>.msg` in the queue folder, appearing there only when whole."""
        name = f"{int(round(time.monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".part"
        try:
            with open(partial, "wb") as file:
                file.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(partial)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel

    def drain_events(self, connection, timeout=None):
        if timeout is not None:
            timeout = min(timeout, DRAIN_SLICE_S)
        return super().drain_events(connection, timeout=timeout)
