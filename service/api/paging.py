"""Cursor paging, shared by every list (jobs, a sweep's table, data sets, models).

A page holds at most `settings.max_page_size` rows; `after` is the `next` cursor of the
previous page (store/jobs_repo.py encodes a row's seq). A page size over the cap is a 422
problem naming `limit`; a cursor this API did not give out — one that does not decode, or
names a seq outside the column's range 1…2³¹−1 — is a 400 problem naming `after`.
"""

from __future__ import annotations

from ntklab.api_schemas import problems as types
from ntklab.api_schemas.problems import FieldError
from ntklab.config.settings import Settings
from ntklab.service.problems import ProblemError
from ntklab.store import jobs_repo

DEFAULT_PAGE_SIZE = 20
"""Rows per page when a list request gives no `limit`."""
NOT_A_CURSOR = "not a cursor this API gave out; pass the `next` of a page"


def checked_limit(limit: int, settings: Settings, rows: str) -> int:
    """`limit` if it is within max_page_size; `rows` names what a page holds ("jobs", "rows", …)."""
    if limit > settings.max_page_size:
        raise invalid("limit", f"at most {settings.max_page_size} {rows} per page", limit, settings.max_page_size)
    return limit


def after_seq(after: str | None) -> int | None:
    """The seq the `after` cursor stands for (None for the first page)."""
    if after is None:
        return None
    seq = jobs_repo.decode_cursor(after)
    if seq is None:
        raise invalid("after", NOT_A_CURSOR, after, status=400)
    return seq


def next_cursor(rows: list, has_more: bool) -> str | None:
    """The cursor of the page after `rows` (rows with a `seq`), or None on the last page."""
    return jobs_repo.encode_cursor(rows[-1].seq) if has_more else None


def invalid(field: str, message: str, value: int | str, limit: int | None = None, *, status: int = 422) -> ProblemError:
    return ProblemError(
        status,
        f"{field}: {message}",
        type=types.VALIDATION,
        title="Request failed validation",
        errors=[FieldError(field=field, message=message, limit=limit, value=value)],
    )
