"""service/body_timing.py on its own: the rule a body's reads are held to, with short real waits.

tests/integration/test_stalled_uploads.py shows the same rule through a live API, with sockets.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from ntklab.service.body_timing import BodyClock, BodyPace, BodyTimeout

PACE = BodyPace(deadline_s=1.0, deadline_setting="upload_deadline_s", min_rate=1000, grace_s=0.2)


def run(coroutine):
    return asyncio.run(coroutine)


def feeder(messages: list[tuple[float, dict]]):
    """An ASGI receive that answers each message after its delay, then waits forever."""
    queue = list(messages)

    async def receive() -> dict:
        if not queue:
            await asyncio.sleep(3600)
        delay, message = queue.pop(0)
        await asyncio.sleep(delay)
        return message

    return receive


def chunk(size: int, more: bool = True) -> dict:
    return {"type": "http.request", "body": b"\0" * size, "more_body": more}


async def read_all(clock: BodyClock) -> int:
    while not clock.done:
        await clock.receive()
    return clock.received


def test_a_body_that_stops_is_refused_after_the_grace_plus_what_its_bytes_bought():
    clock = BodyClock(PACE, feeder([(0, chunk(100))]))
    started = time.monotonic()
    with pytest.raises(BodyTimeout) as refused:
        run(read_all(clock))
    waited = time.monotonic() - started
    assert 0.28 <= waited < 0.8  # 0.2 s of grace + 100 bytes at 1000 B/s
    problem = refused.value.problem
    assert problem.status == 408 and problem.type == "urn:ntklab:problem:body-timeout"
    assert problem.errors[0].field == "body" and problem.errors[0].limit == 1000
    assert "body_min_rate_bytes_per_s" in problem.detail and "body_grace_s" in problem.detail
    assert refused.value.headers == {"Connection": "close"}


def test_a_body_above_the_rate_but_past_the_deadline_is_refused_naming_the_deadline():
    clock = BodyClock(PACE, feeder([(0.1, chunk(500))] * 30))  # 5000 B/s for 3 s
    started = time.monotonic()
    with pytest.raises(BodyTimeout) as refused:
        run(read_all(clock))
    assert 0.95 <= time.monotonic() - started < 1.5
    assert refused.value.problem.errors[0].limit == 1 and "upload_deadline_s" in refused.value.problem.detail


def test_a_body_at_the_rate_is_read_whole_and_reads_after_it_are_not_timed():
    messages = [(0.1, chunk(200))] * 5 + [(0.1, chunk(200, more=False)), (0.6, {"type": "http.disconnect"})]
    clock = BodyClock(PACE, feeder(messages))

    async def body_then_disconnect() -> tuple[int, dict]:
        received = await read_all(clock)
        return received, await clock.receive()  # 0.6 s after the body, past every allowance

    assert run(body_then_disconnect()) == (1200, {"type": "http.disconnect"})


def test_no_minimum_rate_leaves_only_the_deadline():
    pace = BodyPace(deadline_s=0.3, deadline_setting="body_deadline_s", min_rate=0, grace_s=0)
    with pytest.raises(BodyTimeout) as refused:
        run(read_all(BodyClock(pace, feeder([]))))
    assert "body_deadline_s" in refused.value.problem.detail
