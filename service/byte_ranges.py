"""Conditional and range requests on a stored file whose strong validator is its content's SHA-256 (RFC 9110).

    entity tag       "<sha256>"     (strong: equal tags mean equal bytes)
    If-None-Match    a list of tags or `*`; one that matches (weak comparison, §13.1.2) → 304 Not Modified
    Range            bytes=a-b | bytes=a- | bytes=-n, one range, inclusive, 0-based (§14.1.2);
                     b past the end is clipped to size - 1; -n is the last n bytes
    If-Range         the Range is used only while this tag still matches; otherwise the whole file (§13.1.5)

`wanted(...)` turns the headers into the bytes to send: [start, stop) of `size`. A Range in
another unit, or naming several ranges, is ignored (the whole file, as the RFC allows). A
malformed bytes range (`bytes=9-2`, `bytes=x`), or one that starts at or past the end of the file
(a suffix of 0 bytes; any range of an empty file), is a 416 problem naming the field `Range`, with
`Content-Range: bytes */size`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ntklab.api_schemas.problems import FieldError
from ntklab.service.problems import ProblemError

ONE_RANGE = re.compile(r"^\s*(?P<first>\d*)\s*-\s*(?P<last>\d*)\s*$")


@dataclass(frozen=True)
class Wanted:
    """Bytes [start, stop) of a file of `size` bytes; `partial` when they answer a Range (206)."""

    start: int
    stop: int
    size: int
    partial: bool

    @property
    def content_range(self) -> str:
        return f"bytes {self.start}-{self.stop - 1}/{self.size}"


def entity_tag(sha256: str) -> str:
    return f'"{sha256}"'


def not_modified(if_none_match: str | None, etag: str) -> bool:
    """Whether If-None-Match names this tag (W/ prefixes aside) or is `*`."""
    if if_none_match is None:
        return False
    tags = [tag.strip() for tag in if_none_match.split(",")]
    return "*" in tags or etag in (tag.removeprefix("W/") for tag in tags)


def wanted(size: int, range_header: str | None, if_range: str | None, etag: str) -> Wanted:
    """The bytes to send for these request headers (module docstring); raises a 416 ProblemError."""
    whole = Wanted(0, size, size, partial=False)
    if range_header is None or (if_range is not None and if_range.strip() != etag):
        return whole
    unit, _, ranges = range_header.partition("=")
    if unit.strip().lower() != "bytes" or "," in ranges:
        return whole
    found = ONE_RANGE.match(ranges)
    if found is None or not (found["first"] or found["last"]):
        raise unsatisfiable(range_header, size, "is not a byte range: bytes=first-last, bytes=first- or bytes=-length")
    if not found["first"]:
        length = int(found["last"])
        if length == 0 or size == 0:
            raise unsatisfiable(range_header, size, "asks for no bytes")
        return Wanted(max(size - length, 0), size, size, partial=True)
    first = int(found["first"])
    last = int(found["last"]) if found["last"] else size - 1
    if found["last"] and last < first:
        raise unsatisfiable(range_header, size, "ends before it starts")
    if first >= size:
        raise unsatisfiable(
            range_header, size, f"starts at byte {first}, past the last byte of the file ({size} bytes)"
        )
    return Wanted(first, min(last, size - 1) + 1, size, partial=True)


def unsatisfiable(range_header: str, size: int, reason: str) -> ProblemError:
    message = f"the range {range_header!r} {reason}"
    return ProblemError(
        416,
        f"{message}; the file has {size} bytes",
        errors=[FieldError(field="Range", message=message, limit=size)],
        headers={"Content-Range": f"bytes */{size}"},
    )
