"""The embedded broker's transport: a blocking wait comes back within one slice, and messages still flow.

Celery's synchronous worker loop asks for `drain_events(timeout=2.0)` and checks for a shutdown
request only between calls; with kombu's own filesystem transport an idle worker therefore took
4–5 s to stop. These tests use the app `make_celery` builds for a `filesystem://` URL, on real
folders, and a real kombu consumer.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import time
from pathlib import Path

import pytest
from kombu import Consumer, Queue
from kombu.transport.virtual import Empty

from ntklab.config.settings import Settings
from ntklab.workers.celery_app import make_celery
from ntklab.workers.filesystem_transport import DRAIN_SLICE_S, Transport


@pytest.fixture
def app(tmp_path: Path):
    return make_celery(Settings(broker_url="filesystem://", broker_dir=tmp_path / "broker", queue="q-test"))


def test_a_filesystem_url_selects_the_sliced_transport(app):
    with app.connection_for_read() as connection:
        assert isinstance(connection.transport, Transport)


def test_an_idle_wait_of_two_seconds_returns_after_one_slice(app):
    with app.connection_for_read() as connection:
        with Consumer(connection, queues=[Queue("q-test")], accept=["json"]):
            started = time.monotonic()
            with pytest.raises(socket.timeout):
                connection.drain_events(timeout=2.0)
            waited = time.monotonic() - started
    assert DRAIN_SLICE_S <= waited < 1.0


def test_a_published_message_is_still_delivered(app):
    received = []
    with app.connection_for_write() as connection:
        connection.Producer().publish({"job": 7}, routing_key="q-test", declare=[Queue("q-test")], serializer="json")
    with app.connection_for_read() as connection:
        with Consumer(
            connection,
            queues=[Queue("q-test")],
            accept=["json"],
            callbacks=[lambda body, message: (received.append(body), message.ack())],
        ):
            connection.drain_events(timeout=2.0)
    assert received == [{"job": 7}]


def _publish(app, count: int, body: str) -> None:
    with app.connection_for_write() as connection:
        for n in range(count):
            connection.default_channel._put("q-test", {"n": n, "body": body})


def test_a_consumer_never_reads_a_message_before_it_is_whole(app):
    """kombu's writer creates the message file, then writes it; a consumer listing the folder in between read an
    empty or partial file and the worker died on JSONDecodeError (the message lost). Large messages, published by
    another process (the API's place) and read as fast as the folder lists them."""
    count, body = 40, "x" * 8_000_000
    publisher = multiprocessing.get_context("fork").Process(target=_publish, args=(app, count, body))
    received = []
    with app.connection_for_read() as connection:
        publisher.start()
        deadline = time.monotonic() + 120
        while len(received) < count and time.monotonic() < deadline:
            with contextlib.suppress(Empty):
                received.append(connection.default_channel._get("q-test"))
    publisher.join()
    assert [message["n"] for message in received] == list(range(count))
    assert all(message["body"] == body for message in received)


def test_setting_up_the_folders_sweeps_a_dead_producer_s_partial_message_but_not_a_fresh_one(tmp_path: Path):
    """A `.part` an hour old is a producer killed mid-write (never renamed, never consumed); one just written may
    be a live producer's and stays, as do whole messages."""
    queue = tmp_path / "broker" / "queue"
    queue.mkdir(parents=True)
    stale, fresh, whole = queue / "1_a.q-test.msg.part", queue / "2_b.q-test.msg.part", queue / "3_c.q-test.msg"
    for path in (stale, fresh, whole):
        path.write_text("{")
    two_hours_ago = time.time() - 7200
    for path in (stale, whole):
        os.utime(path, (two_hours_ago, two_hours_ago))
    make_celery(Settings(broker_url="filesystem://", broker_dir=tmp_path / "broker", queue="q-test"))
    assert sorted(p.name for p in queue.iterdir()) == [fresh.name, whole.name]
