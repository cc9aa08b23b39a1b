"""Every operation of the OpenAPI schema fuzzed by schemathesis, in process, on a real PostgreSQL database.

Each request must get no 5xx, a status code, content type, headers and body that the
schema declares; afterwards every stored job's spec and every stored sweep's spec must
validate again. Generation is derandomized (the same requests on every run). At least
`MIN_REQUESTS` requests reach each endpoint group; the health endpoints take no input, so
their share comes from random query strings and headers, which they must ignore (a NUL
character in a URL is the one 400). Each campaign (a schema tag, or the health
endpoints' queries) runs once per module, when the first test that needs it asks; the
summary tests ask for all of them, so every test stands alone and in any order.
"""

from __future__ import annotations

import collections
import math
import uuid

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import select

from ntklab.api_schemas.spec import JobSpec
from ntklab.api_schemas.sweeps import SweepSpec
from ntklab.config.settings import Settings
from ntklab.service.app import create_app
from ntklab.store.models import Job, Sweep
from ntklab.store.sweep_specs import job_spec

pytestmark = pytest.mark.slow

MIN_REQUESTS = 500
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
HEALTH = ["/healthz", "/readyz", "/metrics"]
TAGS = ["jobs", "sweeps", "presets", "operations"]
CAMPAIGNS = [*TAGS, "health"]
QUERY_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)


def group_of(path: str) -> str:
    parts = path.strip("/").split("/")
    if parts[0] == "v1" and len(parts) > 1:
        return parts[1]
    return "health" if path in HEALTH else "other"


class CountingApp:
    """ASGI wrapper that counts the HTTP requests reaching each endpoint group."""

    def __init__(self, app):
        self.app = app
        self.requests: collections.Counter[str] = collections.Counter()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.requests[group_of(scope["path"])] += 1
        await self.app(scope, receive, send)


def fuzzing(examples: int):
    return hypothesis_settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def cases(operation) -> st.SearchStrategy:
    """Requests the schema allows, and (where the operation takes input) requests it forbids."""
    positive = operation.as_strategy(GenerationMode.POSITIVE)
    takes_input = operation.body or any(True for _ in operation.iter_parameters())
    return st.one_of(positive, operation.as_strategy(GenerationMode.NEGATIVE)) if takes_input else positive


class Fuzzer:
    """One app on this module's database and the fuzz campaigns against it: one per schema tag, and
    "health" (random query strings and headers on the health endpoints).

    A campaign runs at most once per module and its outcome is kept, so each test asks for the
    campaigns it needs (the summary tests for all of them) and passes or fails the same alone,
    in any order, or after the others (which then cost nothing twice)."""

    def __init__(self, app):
        self.app = app
        self.counted = CountingApp(app)
        self.schema = schemathesis.openapi.from_asgi("/openapi.json", self.counted)
        self.failures: dict[str, Exception | None] = {}

    def run(self, campaign: str) -> None:
        """Run `campaign` unless it ran already; raise its failure (now or again)."""
        if (failure := self._outcome(campaign)) is not None:
            raise failure

    def run_all(self) -> None:
        """Every campaign; a failed one fails the caller by name (its own test shows why)."""
        if failed := [campaign for campaign in CAMPAIGNS if self._outcome(campaign) is not None]:
            pytest.fail(f"fuzz campaigns failed: {failed}; see their own tests")

    def _outcome(self, campaign: str) -> Exception | None:
        if campaign not in self.failures:
            try:
                self._health() if campaign == "health" else self._tag(campaign)
                self.failures[campaign] = None
            except Exception as failure:  # noqa: BLE001 - any failure of the campaign is its outcome, kept
                self.failures[campaign] = failure
        return self.failures[campaign]

    def _tag(self, tag: str) -> None:
        operations = [result.ok() for result in self.schema.include(tag=tag).get_all_operations()]
        with_input = [op for op in operations if op.body or any(True for _ in op.iter_parameters())]
        examples = math.ceil(MIN_REQUESTS / max(1, len(with_input))) + 10
        for operation in operations:

            @fuzzing(examples)
            @given(case=cases(operation))
            def answers_within_schema(case):
                case.call_and_validate(checks=CHECKS)

            answers_within_schema()

    def _health(self) -> None:
        @fuzzing(MIN_REQUESTS)
        @given(
            path=st.sampled_from(HEALTH),
            query=st.dictionaries(QUERY_TEXT, QUERY_TEXT, max_size=3),
            header=st.from_regex(r"\Ax-[a-z]{1,10}\Z"),
            value=st.from_regex(r"\A[ -~]{0,40}\Z"),
        )
        def ignore_any_query_and_header(path, query, header, value):
            with TestClient(self.counted) as client:
                answer = client.get(path, params=query, headers={header: value})
            has_nul = any("\x00" in text for pair in query.items() for text in pair)
            assert answer.status_code == (400 if has_nul else 200), answer.text

        ignore_any_query_and_header()


@pytest.fixture(scope="module")
def fuzz(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Fuzzer:
    settings = Settings(
        database_url=postgres_url,
        broker_url="filesystem://",
        broker_dir=tmp_path_factory.mktemp("broker"),
        queue=f"ntklab-fuzz-{uuid.uuid4().hex[:8]}",
        public_url="http://testserver",
        reaper_enabled=False,
        auth="off",
        max_sweep_jobs=8,
        max_queued_jobs_per_key=100_000,
    )
    return Fuzzer(create_app(settings))


@pytest.mark.parametrize("tag", TAGS)
def test_every_operation_answers_within_its_schema(fuzz, tag):
    fuzz.run(tag)


def test_health_endpoints_ignore_any_query_and_header(fuzz):
    fuzz.run("health")


def test_every_group_got_its_requests(fuzz):
    fuzz.run_all()
    requests = fuzz.counted.requests
    assert {group: requests[group] >= MIN_REQUESTS for group in ("jobs", "sweeps", "presets", "health")} == {
        "jobs": True,
        "sweeps": True,
        "presets": True,
        "health": True,
    }, dict(requests)


def test_nothing_stored_is_garbage(fuzz):
    fuzz.run_all()
    with fuzz.app.state.sessions() as session:
        jobs = [job_spec(job) for job in session.scalars(select(Job))]
        sweeps = session.execute(select(Sweep.id, Sweep.spec)).all()
    assert jobs, "the fuzzer stored at least one job"
    for spec in jobs:
        JobSpec.model_validate(spec)
    for _, spec in sweeps:
        SweepSpec.model_validate(spec)
