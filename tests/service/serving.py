"""An app behind a real uvicorn on a loopback port, in this process, for tests that need real connections."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import uvicorn


@contextlib.contextmanager
def serve(app, **config) -> Iterator[str]:
    """The base URL of `app` served by uvicorn (h11 unless `http` is given) until the block ends."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=1, **config)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=5)
