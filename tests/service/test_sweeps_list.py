"""GET /v1/sweeps: newest first in cursor pages, filtered by derived status and tag, scoped by key.

The status filter is an SQL expression (ntklab.store.sweeps_repo.derived_status); it is checked
against ntklab.analysis.sweep_table.derive_status on every combination of small counts, evaluated
by the database itself, and through the API against each sweep's own GET.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from alembic import command
from sqlalchemy import literal, select, text

from ntklab.analysis.sweep_table import derive_status
from ntklab.store import api_keys, sweeps_repo
from ntklab.store.db import make_engine
from ntklab.store.models import JOB_STATUSES, Job
from tests.worker_writes import written_by_a_worker

SWEEP_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled", "partial")


def sweep_body(name: str, tags: list[str] | None = None, widths=(4, 8)) -> dict:
    return {
        "name": name,
        "tags": tags or [],
        "base": {"model": {"hidden": [4]}, "training": {"max_steps": 3}, "tags": ["base-only"]},
        "grid": {"model.hidden.0": list(widths)},
    }


def submit(client, body: dict, headers: dict | None = None) -> dict:
    answer = client.post("/v1/sweeps", json=body, headers=headers or {})
    assert answer.status_code == 202, answer.text
    return answer.json()


def listed(client, headers: dict | None = None, **params) -> list[dict]:
    """Every sweep the filter lists, following `next` page by page."""
    sweeps, after = [], None
    while True:
        answer = client.get("/v1/sweeps", params=params | ({"after": after} if after else {}), headers=headers or {})
        assert answer.status_code == 200, answer.text
        page = answer.json()
        sweeps += page["data"]
        if not page["has_more"]:
            assert page["next"] is None
            return sweeps
        after = page["next"]


def set_job_statuses(db, sweep_id: str, statuses: list[str]) -> None:
    jobs = db.scalars(select(Job.id).where(Job.sweep_id == sweep_id).order_by(Job.seq)).all()
    for job_id, status in zip(jobs, statuses, strict=True):
        written_by_a_worker(db, job_id, status=status)


def test_pages_list_every_sweep_once_newest_first_with_its_counts(client):
    made = [submit(client, sweep_body(f"s{i}", widths=range(4, 4 + i + 1)))["id"] for i in range(5)]
    first = client.get("/v1/sweeps", params={"limit": 2}).json()
    assert first["object"] == "list" and len(first["data"]) == 2 and first["has_more"] and first["next"]
    summary = first["data"][0]
    assert summary == {
        "id": made[-1],
        "object": "sweep",
        "name": "s4",
        "tags": [],
        "status": "queued",
        "counts": {"queued": 5, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0},
        "total": 5,
        "cancel_requested": False,
        "created_at": summary["created_at"],
        "axes": ["model.hidden.0"],
    }
    assert [sweep["id"] for sweep in listed(client, limit=2)] == made[::-1]
    newer = submit(client, sweep_body("made while paging"))["id"]
    second = client.get("/v1/sweeps", params={"limit": 2, "after": first["next"]}).json()
    assert [sweep["id"] for sweep in second["data"]] == made[2:0:-1], "a new sweep shifts no page not read yet"
    assert listed(client, limit=100)[0]["id"] == newer


def test_the_summary_agrees_with_the_sweep_itself(client, db):
    sweep = submit(client, sweep_body("agree", widths=(4, 8, 16)))
    set_job_statuses(db, sweep["id"], ["succeeded", "failed", "running"])
    (summary,) = listed(client)
    full = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert {key: full[key] for key in summary if key != "axes"} == {
        key: value for key, value in summary.items() if key != "axes"
    }
    assert summary["status"] == "running" and summary["counts"]["failed"] == 1


def test_status_filter_matches_each_sweeps_own_status(client, db):
    states = {
        "queued": ["queued", "queued"],
        "running": ["running", "queued"],
        "succeeded": ["succeeded", "succeeded"],
        "failed": ["failed", "failed"],
        "partial": ["succeeded", "failed"],
        "cancelled": ["cancelled", "cancelled"],
        "part-queued": ["succeeded", "queued"],
    }
    ids = {}
    for label, statuses in states.items():
        ids[label] = submit(client, sweep_body(label))["id"]
        set_job_statuses(db, ids[label], statuses)
    asked = submit(client, sweep_body("cancel asked"))["id"]
    client.post(f"/v1/sweeps/{asked}/cancel")
    own = {sweep_id: client.get(f"/v1/sweeps/{sweep_id}").json()["status"] for sweep_id in [*ids.values(), asked]}
    for status in SWEEP_STATUSES:
        expected = {sweep_id for sweep_id, derived in own.items() if derived == status}
        assert {sweep["id"] for sweep in listed(client, status=status, limit=2)} == expected, status
    assert set(own.values()) == set(SWEEP_STATUSES)
    both = {sweep["id"] for sweep in listed(client, status=["failed", "partial"])}
    assert both == {ids["failed"], ids["partial"]}


def test_a_sweep_whose_jobs_were_all_deleted_is_still_listed_as_cancelled(client, db):
    sweep = submit(client, sweep_body("emptied"))
    set_job_statuses(db, sweep["id"], ["failed", "cancelled"])
    for row in sweep["table"]:
        assert client.delete(f"/v1/jobs/{row['job_id']}").status_code == 204
    assert [s["id"] for s in listed(client, status="cancelled")] == [sweep["id"]]
    assert client.get(f"/v1/sweeps/{sweep['id']}").json()["status"] == "cancelled"


def test_tag_filter_is_on_the_sweeps_own_tags(client):
    fig = submit(client, sweep_body("fig", ["paper", "fig1"]))["id"]
    other = submit(client, sweep_body("other", ["paper"]))["id"]
    preset = client.post("/v1/presets/fig1-width", json={"scale": "smoke"}).json()["id"]
    assert [s["id"] for s in listed(client, tag="fig1")] == [fig]
    assert [s["id"] for s in listed(client, tag="paper")] == [other, fig]
    assert [s["id"] for s in listed(client, tag="fig1-width")] == [preset]
    assert listed(client, tag="base-only") == [], "a tag only the base carries is the jobs', not the sweep's"
    assert [s["id"] for s in listed(client, tag="paper", status="queued")] == [other, fig]


def test_bad_cursor_limit_and_status_are_problems_naming_the_field(client, settings):
    submit(client, sweep_body("one"))
    for cursor in ("not-a-cursor", "c2VxOjA", "c2VxOjk5OTk5OTk5OTk5"):  # garbage, seq:0, seq past 2^31-1
        answer = client.get("/v1/sweeps", params={"after": cursor})
        assert answer.status_code == 400, (cursor, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["errors"][0]["field"] == "after"
    over = client.get("/v1/sweeps", params={"limit": settings.max_page_size + 1})
    assert over.status_code == 422
    error = over.json()["errors"][0]
    assert (error["field"], error["limit"], error["value"]) == (
        "limit",
        settings.max_page_size,
        settings.max_page_size + 1,
    )
    assert client.get("/v1/sweeps", params={"status": "done"}).status_code == 422


def test_each_key_lists_its_own_sweeps_and_the_admin_key_all(client_with):
    secured = client_with(auth="on")
    with secured.app.state.sessions() as session:
        alice, bob, admin = (
            api_keys.create_key(session, name, is_admin=name == "root") for name in ("alice", "bob", "root")
        )
    headers = {name: {"X-API-Key": key.secret} for name, key in (("alice", alice), ("bob", bob), ("admin", admin))}
    mine = submit(secured, sweep_body("alice's"), headers["alice"])["id"]
    theirs = submit(secured, sweep_body("bob's"), headers["bob"])["id"]
    assert [s["id"] for s in listed(secured, headers["alice"])] == [mine]
    assert [s["id"] for s in listed(secured, headers["bob"])] == [theirs]
    assert [s["id"] for s in listed(secured, headers["admin"])] == [theirs, mine]
    assert secured.get("/v1/sweeps").status_code == 401


def test_derived_status_in_sql_is_derive_status(db):
    """Every {status: count} with counts 0–2 and both cancel flags, evaluated by this database."""
    cases = []
    for values in itertools.product(range(3), repeat=len(JOB_STATUSES)):
        counts = Counter(dict(zip(JOB_STATUSES, values)))
        for cancel_requested in (False, True):
            cases.append((counts, cancel_requested))
    expressions = [
        sweeps_repo.derived_status(
            {**{s: literal(counts[s]) for s in JOB_STATUSES}, "total": literal(sum(counts.values()))},
            literal(cancel_requested),
        )
        for counts, cancel_requested in cases
    ]
    for start in range(0, len(cases), 200):
        row = db.execute(select(*expressions[start : start + 200])).one()
        for (counts, cancel_requested), in_sql in zip(cases[start : start + 200], row):
            assert in_sql == derive_status(counts, cancel_requested), (dict(counts), cancel_requested)


@pytest.mark.parametrize("fresh_database", ("sqlite", "postgresql"), indirect=True)
def test_0007_numbers_and_tags_the_sweeps_stored_before(fresh_database, alembic_for):
    _, url = fresh_database
    command.upgrade(alembic_for(url), "0006")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            for sweep_id, created, spec in (
                ("swp_b", "2026-01-02", '{"tags": ["x", "y"]}'),
                ("swp_a", "2026-01-01", "{}"),
            ):
                connection.execute(
                    text(
                        "INSERT INTO sweeps (id, owner, name, spec, cancel_requested, created_at) "
                        "VALUES (:id, 'alice', 'n', :spec, false, :created)"
                    ),
                    {"id": sweep_id, "spec": spec, "created": created},
                )
        command.upgrade(alembic_for(url), "head")
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO sweeps (id, owner, name, spec, cancel_requested, created_at) "
                    "VALUES ('swp_c', 'alice', 'n', '{}', false, '2026-01-03')"
                )
            )
            seqs = dict(connection.execute(text("SELECT id, seq FROM sweeps")).all())
            tags = connection.execute(text("SELECT sweep_id, tag FROM sweep_tags ORDER BY tag")).all()
        command.downgrade(alembic_for(url), "0006")
        command.upgrade(alembic_for(url), "head")
    finally:
        engine.dispose()
    assert seqs == {"swp_a": 1, "swp_b": 2, "swp_c": 3}
    assert [tuple(row) for row in tags] == [("swp_b", "x"), ("swp_b", "y")]
