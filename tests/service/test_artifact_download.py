"""The SDK's `jobs.download_to`: an artifact streamed into a file, resumed with a range request after a broken
connection, against the service's real artifact endpoint (in process; both databases).

The fault is injected between the SDK and the app: `Breaking` passes every request to the app's own transport
and cuts the body of its first answers with a connection error after `keep` bytes, as a dropped connection
would; it records the Range and If-Range each request carried."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from ntklab import AsyncClient, Client
from ntklab.errors import NotFoundError
from tests.service.test_artifact_blobs import BIG, BIG_TAG, finished_with

KEEP = 1_000_000
"""Bytes of a broken answer that arrive before the connection drops: within BIG's first chunk."""


class _Cut(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, keep: int) -> None:
        self.inner, self.keep = inner, keep

    def __iter__(self) -> Iterator[bytes]:
        sent = 0
        for chunk in self.inner:
            part = chunk[: self.keep - sent]
            sent += len(part)
            yield part
            if sent >= self.keep:
                raise httpx.ReadError("connection reset by the test")


class Breaking(httpx.BaseTransport):
    """The app's transport; the first `breaks` answers end after `keep` body bytes (each); `if_range`, when given, replaces
    the If-Range a request carries (as though the artifact had changed between attempts)."""

    def __init__(self, inner: httpx.BaseTransport, breaks: int, if_range: str | None = None, keep: int = KEEP) -> None:
        self.inner, self.breaks, self.if_range, self.keep = inner, breaks, if_range, keep
        self.seen: list[tuple[str | None, str | None]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.if_range and "If-Range" in request.headers:
            request.headers["If-Range"] = self.if_range
        self.seen.append((request.headers.get("Range"), request.headers.get("If-Range")))
        answer = self.inner.handle_request(request)
        body: httpx.SyncByteStream = httpx.ByteStream(answer.read())
        if self.breaks:
            self.breaks -= 1
            body = _Cut(body, self.keep)
        return httpx.Response(answer.status_code, headers=answer.headers, stream=body)


def sdk(client, breaking: Breaking | None = None) -> Client:
    transport = breaking or Breaking(client._transport, breaks=0)
    return Client(base_url="http://testserver", http_client=httpx.Client(transport=transport))


@pytest.fixture
def folder(tmp_path):
    """An empty folder of its own (the app's database lies in tmp_path)."""
    out = tmp_path / "downloads"
    out.mkdir()
    return out


@pytest.fixture
def kernel_job(client) -> str:
    """A finished job whose kernel.npy is BIG (three blob chunks, the last one short)."""
    return finished_with(client, {"kernel.npy": ("application/x-npy", BIG)})


def test_download_to_writes_the_artifact_and_leaves_no_part_file(client, kernel_job, folder):
    target = folder / "kernel.npy"
    assert sdk(client).jobs.download_to(kernel_job, "kernel.npy", target) == len(BIG)
    assert target.read_bytes() == BIG
    assert [path.name for path in folder.iterdir()] == ["kernel.npy"]


def test_a_broken_download_resumes_at_the_bytes_it_kept(client, kernel_job, folder):
    breaking = Breaking(client._transport, breaks=1)
    target = folder / "kernel.npy"
    assert sdk(client, breaking).jobs.download_to(kernel_job, "kernel.npy", target) == len(BIG)
    assert target.read_bytes() == BIG
    assert breaking.seen == [(None, None), (f"bytes={KEEP}-", BIG_TAG)]


def test_a_changed_artifact_is_downloaded_afresh_from_its_first_byte(client, kernel_job, folder):
    breaking = Breaking(client._transport, breaks=1, if_range='"' + "0" * 64 + '"')
    target = folder / "kernel.npy"
    assert sdk(client, breaking).jobs.download_to(kernel_job, "kernel.npy", target) == len(BIG)
    assert target.read_bytes() == BIG
    assert [rng for rng, _ in breaking.seen] == [None, f"bytes={KEEP}-"]


def test_a_download_that_keeps_breaking_raises_and_leaves_no_file(client, kernel_job, folder):
    breaking = Breaking(client._transport, breaks=3, keep=1000)
    target = folder / "kernel.npy"
    with pytest.raises(Exception, match="Connection error"):
        sdk(client, breaking).jobs.download_to(kernel_job, "kernel.npy", target)
    assert [rng for rng, _ in breaking.seen] == [None, "bytes=1000-", "bytes=2000-"]  # the try, max_retries = 2
    assert list(folder.iterdir()) == []


def test_a_missing_artifact_is_not_found_and_writes_nothing(client, kernel_job, folder):
    with pytest.raises(NotFoundError):
        sdk(client).jobs.download_to(kernel_job, "nothing.npy", folder / "x.npy")
    assert list(folder.iterdir()) == []


def test_the_async_client_downloads_to_a_file_too(client, folder):
    job_id = finished_with(client, {"weights.npz": ("application/zip", BIG[:54321])})
    target = folder / "weights.npz"

    async def download() -> int:
        transport = httpx.ASGITransport(app=client.app)
        async with httpx.AsyncClient(transport=transport) as http:
            return await AsyncClient(base_url="http://testserver", http_client=http).jobs.download_to(
                job_id, "weights.npz", target
            )

    assert asyncio.run(download()) == 54321
    assert target.read_bytes() == BIG[:54321]
