"""Checking an uploaded data set: x and y as .npy files (or the two members of an .npz), headers first.

Accepted (anything else is a 4xx naming the array and the reason; nothing is stored):

    x   [points, ...] (2-D or more), float16/32/64 or (u)int8…int64 — integers are token ids
        for embedding inputs and are kept as int64 by the engine
    y   [points] or [points, O], float or integer — integers in one column are class labels
        (cross-entropy), their smallest and largest value recorded like x's
    every value finite; 1 ≤ points ≤ settings.max_train_points; each array, and the two
    together, at most settings.max_upload_bytes

The .npy header is parsed (numpy's own parser: a Python literal, never a pickle) and checked
before any data is read, so a header declaring 10⁹ rows is refused at once; the data must
then be exactly the bytes the header declares. Values are checked through a read-only
memory map, a block of rows at a time. `allow_pickle` is never true.
"""

from __future__ import annotations

import hashlib
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import FieldError
from ntklab.api_schemas.uploads import INVALID_UPLOAD
from ntklab.config.settings import Settings
from ntklab.service.problems import ProblemError
from ntklab.service.uploads import Received, invalid, too_large, upload_disk

NPZ_MEMBERS = {"x.npy": "x", "y.npy": "y"}
MAX_ARRAY_DIMENSIONS = 64  # numpy's own limit on an array's dimensions (NPY_MAXDIMS, numpy >= 2.0)
MAX_HEADER_BYTES = 10_000
COPY_BYTES = 1 << 20
CHECK_VALUES = 1 << 22


@dataclass(frozen=True)
class CheckedArray:
    """An array that passed every check, as a .npy file on disk with its SHA-256."""

    path: Path
    sha256: str
    size: int
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass(frozen=True)
class CheckedDataset:
    x: CheckedArray
    y: CheckedArray
    x_range: tuple[int, int] | None = None
    """An integer x's smallest and largest value (token ids, checked against a model's vocabulary at submission)."""
    y_range: tuple[int, int] | None = None
    """An integer y's smallest and largest value (class labels, checked against a model's outputs at submission)."""

    @property
    def points(self) -> int:
        return self.x.shape[0]


def check_dataset(received: Received, folder: Path, settings: Settings) -> CheckedDataset:
    """The upload's x and y, checked; raises a 413/422 problem naming the array at fault."""
    if "file" in received.files:
        if {"x", "y"} & set(received.files):
            raise invalid("file", "send either one .npz file or the x and y .npy files, not both")
        x, y = _from_npz(received.files["file"].path, folder, settings)
    else:
        missing = [name for name in ("x", "y") if name not in received.files]
        if missing:
            raise invalid(
                missing[0], f"the {missing[0]} array is missing: send an .npz with x and y, or .npy parts x and y"
            )
        x, y = (
            _from_npy(received.files[name].path, name, received.files[name].sha256, settings) for name in ("x", "y")
        )
    if y.shape[0] != x.shape[0]:
        raise invalid("y", f"y has {y.shape[0]} rows but x has {x.shape[0]}", value=y.shape[0])
    if x.size + y.size > settings.max_upload_bytes:
        raise too_large(x.size + y.size, settings.max_upload_bytes, "unpacks to")
    y_range = _check_values(y, "y")
    return CheckedDataset(x, y, x_range=_check_values(x, "x"), y_range=y_range)


# --------------------------------------------------------------------------- headers


@dataclass(frozen=True)
class Header:
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int

    @property
    def data_bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def read_header(stream: BinaryIO, name: str) -> Header:
    """Parse the .npy magic and header (numpy's literal parser); refuses object, structured and Fortran-less oddities."""
    try:
        version = npy.read_magic(stream)
        reader = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(version)
        if reader is None:
            raise ValueError(f"unsupported .npy format version {version}")
        shape, _fortran_order, dtype = reader(stream, max_header_size=MAX_HEADER_BYTES)
    except (ValueError, SyntaxError, TypeError, EOFError, OSError) as error:
        raise invalid(name, f"not a .npy array (numpy's format): {error}") from None
    return Header(tuple(int(n) for n in shape), dtype, stream.tell() if stream.seekable() else -1)


def check_header(header: Header, name: str, settings: Settings) -> None:
    dtype, shape = header.dtype, header.shape
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise invalid(
            name,
            f"dtype {dtype.str!r} is not allowed: only float and integer arrays (never objects or pickles)",
            value=dtype.str,
        )
    if (
        dtype.kind not in "fiu"
        or (dtype.kind == "u" and dtype.itemsize == 8)
        or (dtype.kind == "f" and dtype.itemsize > 8)
    ):
        raise invalid(name, f"dtype {dtype.name} is not allowed: float16/32/64 or (u)int8…int64 only", value=dtype.name)
    if len(shape) > MAX_ARRAY_DIMENSIONS:
        message = f"{name} declares {len(shape)} dimensions; numpy holds at most {MAX_ARRAY_DIMENSIONS}"
        raise ProblemError(
            422,
            f"{name}: {message}",
            type=INVALID_UPLOAD,
            title="Upload refused",
            errors=[FieldError(field=name, message=message, limit=MAX_ARRAY_DIMENSIONS, value=len(shape))],
        )
    if name == "x" and len(shape) < 2:
        raise invalid(
            name, f"x must be [points, ...] with at least 2 dimensions; it is {list(shape)}", value=len(shape)
        )
    if name == "y" and len(shape) not in (1, 2):
        raise invalid(name, f"y must be [points] or [points, O]; it is {list(shape)}", value=len(shape))
    if any(n < 1 for n in shape):
        raise invalid(name, f"{name} has an empty dimension: shape {list(shape)}")
    if shape[0] > settings.max_train_points:
        message = (
            f"{name} declares {shape[0]} points; the cap is {settings.max_train_points} (setting max_train_points)"
        )
        raise ProblemError(
            422,
            message,
            type=types.RESOURCE_CAP,
            title="Request exceeds a resource cap",
            errors=[FieldError(field=name, message=message, limit=settings.max_train_points, value=shape[0])],
        )
    if header.data_bytes > settings.max_upload_bytes:
        raise too_large(header.data_bytes, settings.max_upload_bytes, f"declares an array ({name}) of")


# --------------------------------------------------------------------------- .npy and .npz


def _from_npy(path: Path, name: str, sha256: str, settings: Settings) -> CheckedArray:
    with open(path, "rb") as stream:
        header = read_header(stream, name)
    check_header(header, name, settings)
    size = path.stat().st_size
    expected = header.offset + header.data_bytes
    if size != expected:
        what = "truncated" if size < expected else "followed by extra bytes"
        raise invalid(name, f"the .npy data is {what}: the header declares {expected} bytes, the file has {size}")
    return CheckedArray(path, sha256, size, header.shape, header.dtype)


def _from_npz(path: Path, folder: Path, settings: Settings) -> tuple[CheckedArray, CheckedArray]:
    """Unpack x.npy and y.npy once both headers are checked and what they unpack to fits max_upload_bytes.

    Nothing is written before every member's size is known from its zip entry (file_size) and
    its .npy header (shape × itemsize), and the two agree: a small archive declaring large
    arrays is refused before it takes any room in the upload's folder."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise invalid("file", f"not an .npz (zip) archive: {error}") from None
    with archive:
        names = archive.namelist()
        unexpected = sorted(set(names) - set(NPZ_MEMBERS))
        if unexpected or len(names) != len(set(names)):
            raise invalid(
                "file", f"the .npz must hold exactly x.npy and y.npy; it also holds {unexpected or 'duplicates'}"
            )
        unpacked = 0
        for member, name in NPZ_MEMBERS.items():
            if member not in names:
                raise invalid(name, f"the .npz has no array {name!r} (np.savez(path, x=..., y=...))")
            unpacked += _declared(archive, archive.getinfo(member), name, settings)
        if unpacked > settings.max_upload_bytes:
            raise too_large(unpacked, settings.max_upload_bytes, "unpacks to")
        checked = {
            name: _unpack(archive, archive.getinfo(member), name, folder / f"{name}.npy", settings)
            for member, name in NPZ_MEMBERS.items()
        }
    return checked["x"], checked["y"]


def _declared(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, settings: Settings) -> int:
    """The bytes a member unpacks to, from its zip entry and its .npy header (only the header is decompressed)."""
    if info.file_size > settings.max_upload_bytes:
        raise too_large(info.file_size, settings.max_upload_bytes, f"declares an array ({name}) of")
    try:
        with archive.open(info) as member:
            header = read_header(member, name)
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError, OSError) as error:
        raise invalid(name, f"cannot unpack {info.filename} from the .npz: {error}") from None
    check_header(header, name, settings)
    expected = header.offset + header.data_bytes
    if info.file_size != expected:
        what = "truncated" if info.file_size < expected else "followed by extra bytes"
        raise invalid(
            name,
            f"the .npy data is {what}: the header declares {expected} bytes, the .npz entry holds {info.file_size}",
        )
    return expected


class _Tee:
    """Reads from a stream while writing, hashing and counting every byte read."""

    def __init__(self, source: BinaryIO, target: BinaryIO) -> None:
        self.source, self.target = source, target
        self.hash, self.count = hashlib.sha256(), 0

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        self.target.write(data)
        self.hash.update(data)
        self.count += len(data)
        return data

    def seekable(self) -> bool:
        return False


def _unpack(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, target: Path, settings: Settings
) -> CheckedArray:
    try:
        with upload_disk(), archive.open(info) as member, open(target, "wb") as out:
            tee = _Tee(member, out)
            header = read_header(tee, name)
            check_header(header, name, settings)
            expected = tee.count + header.data_bytes
            while tee.count <= expected and tee.read(min(COPY_BYTES, expected + 1 - tee.count)):
                pass
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError, OSError) as error:
        raise invalid(name, f"cannot unpack {info.filename} from the .npz: {error}") from None
    if tee.count != expected:
        what = "truncated" if tee.count < expected else "followed by extra bytes"
        raise invalid(name, f"the .npy data is {what}: the header declares {expected} bytes")
    return CheckedArray(target, tee.hash.hexdigest(), tee.count, header.shape, header.dtype)


# --------------------------------------------------------------------------- values


def _check_values(array: CheckedArray, name: str) -> tuple[int, int] | None:
    """Every value finite (integers always are), read through a memory map a block of rows at a time; for an integer
    array its (smallest, largest) value, clamped to the signed 64-bit range the database holds, else None."""
    if array.dtype.kind not in "fiu":
        return None
    try:
        values = np.load(array.path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as error:
        raise invalid(name, f"numpy cannot read {name}: {error}") from None
    if array.dtype.kind in "iu":
        return _integer_range(values) if values.size else None
    per_row = max(1, math.prod(array.shape[1:]))
    rows = max(1, CHECK_VALUES // per_row)
    for start in range(0, array.shape[0], rows):
        block = np.asarray(values[start : start + rows])
        finite = np.isfinite(block)
        if not finite.all():
            where = tuple(int(i) for i in np.argwhere(~finite)[0])
            at = (start + where[0], *where[1:])
            bad = block[where]
            raise invalid(
                name, f"{name} holds a non-finite value ({bad}) at index {list(at)}; every value must be finite"
            )
    del values
    return None


def _integer_range(values: np.ndarray) -> tuple[int, int]:
    """min and max a block of rows at a time (a memory map is read once), clamped to [−2⁶³, 2⁶³ − 1]."""
    per_row = max(1, math.prod(values.shape[1:]))
    rows = max(1, CHECK_VALUES // per_row)
    low, high = None, None
    for start in range(0, values.shape[0], rows):
        block = np.asarray(values[start : start + rows])
        low = int(block.min()) if low is None else min(low, int(block.min()))
        high = int(block.max()) if high is None else max(high, int(block.max()))
    return max(low, -(2**63)), min(high, 2**63 - 1)
