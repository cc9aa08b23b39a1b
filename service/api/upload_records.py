"""An owner's stored uploads, data sets and models alike: a page of them, one by id, one deleted unless a job uses it.

Shared by /v1/datasets and /v1/models (service/api/routes/), which differ only in their table and their words.
"""

from __future__ import annotations

from ntklab.api_schemas import problems as types
from ntklab.config.settings import Settings
from ntklab.service.api import paging
from ntklab.service.problems import ProblemError
from ntklab.store import uploads_repo


def page(session, table, scope: str | None, settings: Settings, limit: int, after: str | None):
    """One page of `table`'s rows that `scope` may see, newest first: (rows, has_more, next cursor)."""
    limit = paging.checked_limit(limit, settings, table.__tablename__)
    rows, has_more = uploads_repo.list_page(session, table, scope, limit, paging.after_seq(after))
    return rows, has_more, paging.next_cursor(rows, has_more)


def owned(session, table, scope: str | None, upload_id: str, what: str):
    """The row of `table` with this id if `scope` may see it; a 404 naming `what` otherwise."""
    row = uploads_repo.get(session, table, scope, upload_id)
    if row is None:
        raise ProblemError(404, f"no such {what}")
    return row


def delete_unless_used(session, row, spec_path: tuple[str, str], what: str) -> None:
    """Delete the upload unless a queued or running job uses it (409 listing them).

    The row is held first (uploads_repo.hold_for_delete), so a submission naming it either
    committed before (its jobs are found here: 409) or waits for this commit and finds the
    upload gone (422 on its `data.id` or `model.id`)."""
    if uploads_repo.hold_for_delete(session, row) is None:
        session.rollback()
        raise ProblemError(404, f"no such {what}")
    users = uploads_repo.active_jobs_using(session, row.owner, spec_path, row.id)
    if users:
        listed = ", ".join(users) + (", …" if len(users) == 10 else "")
        session.rollback()
        raise ProblemError(
            409,
            f"the {what} is used by queued or running jobs ({listed}); cancel them or wait until they finish",
            type=types.INVALID_STATE,
        )
    uploads_repo.delete_upload(session, row)
    session.commit()
