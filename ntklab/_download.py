"""Artifact downloads streamed to a file and resumed after a broken connection.

    client.jobs.download_to(job, "kernel_init.npy", "kernel.npy")   -> bytes written

The body goes to `<destination>.part` as it arrives (memory: one chunk, whatever the artifact's
size) and is renamed onto the destination only once whole, so a failed download never leaves a
truncated file under the destination's name (the part file is removed). Retries follow the
client's policy (connection errors, timeouts, 429, 5xx; `max_retries`), and a retry asks for the
rest only: `Range: bytes=<written>-` with `If-Range: <the first answer's ETag>`. The service
answers 206 with exactly those bytes while the artifact is unchanged, or 200 with the whole
artifact, which starts the file afresh.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

import httpx
from tenacity import AsyncRetrying, Retrying

from ntklab._http import AsyncTransport, Transport, retry_policy

PathLike = str | os.PathLike[str]


class _Resume:
    """What has been written to the part file, and the artifact version (ETag) it belongs to."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.etag: str | None = None

    def headers(self) -> dict[str, str]:
        """A range request for the bytes still missing, once some are kept and their version is known."""
        written = self.file.tell()
        if written and self.etag:
            return {"Range": f"bytes={written}-", "If-Range": self.etag}
        return {}

    def begin(self, response: httpx.Response) -> None:
        """A 206 continues the kept bytes; anything else is the whole artifact, written from the start."""
        if response.status_code != 206:
            self.file.seek(0)
            self.file.truncate()
        self.etag = response.headers.get("ETag")


def _part_of(destination: PathLike) -> tuple[Path, Path]:
    target = Path(destination)
    return target, target.with_name(target.name + ".part")


def download_to(transport: Transport, path: str, destination: PathLike) -> int:
    """GET `path` into the file `destination` (module docstring); returns its size in bytes."""
    target, part = _part_of(destination)
    try:
        with part.open("wb") as file:
            resume = _Resume(file)
            for attempt in Retrying(**retry_policy(transport.options.max_retries)):
                with attempt, transport.stream(path, headers=resume.headers()) as response:
                    resume.begin(response)
                    for chunk in response.iter_bytes():
                        file.write(chunk)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    part.replace(target)
    return target.stat().st_size


async def async_download_to(transport: AsyncTransport, path: str, destination: PathLike) -> int:
    """`download_to`, awaited (the file is written from the event loop's thread, one chunk at a time)."""
    target, part = _part_of(destination)
    try:
        with part.open("wb") as file:
            resume = _Resume(file)
            async for attempt in AsyncRetrying(**retry_policy(transport.options.max_retries)):
                with attempt:
                    async with transport.stream(path, headers=resume.headers()) as response:
                        resume.begin(response)
                        async for chunk in response.aiter_bytes():
                            file.write(chunk)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    part.replace(target)
    return target.stat().st_size
