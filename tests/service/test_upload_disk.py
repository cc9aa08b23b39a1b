"""The temporary disk of uploads (issue 25, items 8 and 10).

- An .npz is refused from what its entries declare (zip file_size and the .npy headers)
  before anything is unpacked: before, a 228 KiB archive unpacked to 229 MiB in the upload's
  folder before its 413.
- Upload folders a killed API process leaves behind are removed when an API starts, and
  only those: a real API (uvicorn) is killed with SIGKILL mid-upload, another API has an
  upload in progress, and a third starts. Before, the folder stayed for good (476 MiB after
  three kills).
"""

from __future__ import annotations

import hashlib
import io
import os
import socket
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ntklab.config.settings import Settings
from ntklab.localstack import LocalStack, StackError, embedded_settings, wait_until
from ntklab.service import upload_folders
from ntklab.service.array_upload import check_dataset
from ntklab.service.problems import ProblemError
from ntklab.service.uploads import Received, ReceivedFile
from tests.upload_files import npy


def received_npz(folder: Path, members: dict[str, bytes], declared: dict[str, int] | None = None) -> Received:
    """An .npz (deflated) in `folder` as the upload `file`; `declared` overrides an entry's file_size in the zip."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    body = buffer.getvalue()
    for name, size in (declared or {}).items():
        body = _with_file_size(body, name, size)
    path = folder / "file"
    path.write_bytes(body)
    return Received(files={"file": ReceivedFile(path, len(body), hashlib.sha256(body).hexdigest(), "d.npz")})


def _with_file_size(body: bytes, name: str, size: int) -> bytes:
    """The archive with `name`'s uncompressed size rewritten in its local header and central directory entry."""
    data = bytearray(body)
    encoded = name.encode()
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = 0
        while (at := data.find(signature, at)) >= 0:
            name_at = at + (30 if signature == b"PK\x03\x04" else 46)
            if data[name_at : name_at + len(encoded)] == encoded:
                data[at + offset : at + offset + 4] = size.to_bytes(4, "little")
            at += 4
    return bytes(data)


def unpacked(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name != "file")


def test_an_npz_over_the_budget_is_refused_before_anything_is_unpacked(tmp_path: Path):
    """x and y each fit max_upload_bytes, together they do not; both compress to almost nothing."""
    x, y = npy(np.zeros((6000, 2))), npy(np.zeros(12000))
    received = received_npz(tmp_path, {"x.npy": x, "y.npy": y})
    assert received.files["file"].size < 2000 < 100_000 < len(x) + len(y)
    with pytest.raises(ProblemError) as refused:
        check_dataset(received, tmp_path, Settings(max_upload_bytes=100_000))
    assert refused.value.status_code == 413
    assert refused.value.problem.errors[0].limit == 100_000 and refused.value.problem.errors[0].value == len(x) + len(y)
    assert unpacked(tmp_path) == [], "nothing may be written before the whole archive is known to fit"


def test_an_entry_whose_zip_size_disagrees_with_its_npy_header_is_refused_unpacked(tmp_path: Path):
    x, y = npy(np.zeros((50_000, 2))), npy(np.zeros(50_000))
    received = received_npz(tmp_path, {"x.npy": x, "y.npy": y}, declared={"y.npy": len(y) - 8})
    with pytest.raises(ProblemError) as refused:
        check_dataset(received, tmp_path, Settings())
    assert refused.value.status_code == 422
    assert refused.value.problem.errors[0].field == "y" and "truncated" in refused.value.detail
    assert unpacked(tmp_path) == []


def test_an_npz_within_the_budget_is_still_accepted(tmp_path: Path):
    x, y = npy(np.ones((50, 2))), npy(np.ones(50))
    checked = check_dataset(
        received_npz(tmp_path, {"x.npy": x, "y.npy": y}), tmp_path, Settings(max_upload_bytes=len(x) + len(y))
    )
    assert checked.points == 50 and unpacked(tmp_path) == ["x.npy", "y.npy"]


# --------------------------------------------------------------------------- folders left by a crash


def stalled_upload(port: int, declared: int = 1_000_000, sent: int = 200_000) -> socket.socket:
    """A raw upload that sends its headers and `sent` bytes of a `declared`-byte body, then nothing."""
    connection = socket.create_connection(("127.0.0.1", port))
    connection.sendall(
        f"POST /v1/datasets HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {declared}\r\n\r\n".encode()
        + b"\0" * sent
    )
    return connection


def folder_of(root: Path, pid: int, at_least: int) -> Path:
    """The upload folder of process `pid` once it holds `at_least` bytes.

    Ask for well under what was sent: the API writes through a buffered file, so the body's last
    chunk (3,392 B of 200,000 when uvicorn hands it over as 3 × 64 KiB + the rest) can sit in the
    write buffer until more arrives. Waiting for every byte sent made this test fail whenever the
    body arrived split that way.
    """

    def found() -> Path | None:
        for folder in root.glob(f"{upload_folders.PREFIX}*~{pid}~*"):
            if sum(f.stat().st_size for f in folder.iterdir()) >= at_least:
                return folder
        return None

    def seen() -> str:
        return ", ".join(
            f"{folder.name}: {sum(f.stat().st_size for f in folder.iterdir())} B" for folder in root.glob("*")
        )

    try:
        wait_until(lambda: found() is not None, 30, f"no upload folder of process {pid} under {root}")
    except StackError as error:
        raise AssertionError(f"{error} holding {at_least} B; seen: {seen() or 'none'}") from None
    return found()


def test_a_killed_apis_upload_folder_is_swept_when_an_api_starts_and_a_live_ones_is_kept(tmp_path: Path):
    root = tmp_path / "uploads"
    environment = embedded_settings(tmp_path / "stack") | {
        "NTKLAB_UPLOAD_DIR": str(root),
        "NTKLAB_AUTH": "off",
        "NTKLAB_BODY_GRACE_S": "600",
    }
    killed, live, starting = (
        LocalStack(environment, tmp_path / f"logs-{name}") for name in ("killed", "live", "starting")
    )
    connections = []
    try:
        live.start_api()
        connections.append(stalled_upload(live.port))
        in_progress = folder_of(root, live.api.pid, 100_000)

        killed.start_api()
        assert in_progress.exists(), "a running API's upload in progress is kept"
        connections.append(stalled_upload(killed.port))
        left = folder_of(root, killed.api.pid, 100_000)
        killed.kill(killed.api)
        assert left.exists(), "SIGKILL runs no clean-up: the folder stays"

        starting.start_api()
        assert not left.exists(), "the killed API's folder is removed when the next API starts"
        assert in_progress.exists(), "a running API's upload in progress is kept"
        assert "removed 1 upload folders" in (tmp_path / "logs-starting" / "api.log").read_text()
    finally:
        for connection in connections:
            connection.close()
        for stack in (killed, live, starting):
            stack.stop()


def test_folders_of_another_host_or_unknown_names_go_only_once_stale(tmp_path: Path):
    fresh = tmp_path / f"{upload_folders.PREFIX}otherhost~abc~1~1-x1"
    stale = tmp_path / f"{upload_folders.PREFIX}otherhost~abc~2~1-x2"
    legacy = tmp_path / f"{upload_folders.PREFIX}k3j4h5g6"
    for folder in (fresh, stale, legacy):
        folder.mkdir()
        (folder / "file").write_bytes(b"\0" * 10)
    old = time.time() - 3 * 3600
    for path in (stale, stale / "file", legacy, legacy / "file"):
        os.utime(path, (old, old))
    swept = upload_folders.sweep(tmp_path, stale_after_s=3600)
    assert (swept.folders, swept.bytes) == (2, 20)
    assert fresh.exists() and not stale.exists() and not legacy.exists()
