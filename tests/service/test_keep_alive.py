"""A 500 is answered as a problem on a connection that stays open (issue 25, item 6), over a real uvicorn.

Starlette's ServerErrorMiddleware answers an unexpected error with the handler's 500 problem and
then raises the error again, and uvicorn closes any connection whose request raised after its
answer started: before the fix a client's next requests on it were lost (9 of 9 follow-ups in
the issue). The route that fails is mounted by the test; the server sees which connection each
request came on by the client's port.
"""

from __future__ import annotations

import importlib.util

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from ntklab.service.app import create_app
from tests.service.serving import serve

PROBLEM = "application/problem+json"
PROTOCOLS = ["h11"] + (["httptools"] if importlib.util.find_spec("httptools") else [])


def with_failing_routes(app: FastAPI) -> FastAPI:
    @app.get("/test-only/port")
    def port(request: Request) -> dict:
        return {"port": request.client.port}

    @app.get("/test-only/boom")
    def boom():
        raise RuntimeError("secret-connection-string")

    @app.get("/test-only/boom-async")
    async def boom_async():
        raise LookupError("secret")

    return app


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_500_keeps_the_connection_for_the_requests_after_it(settings, protocol):
    app = with_failing_routes(create_app(settings))
    with serve(app, http=protocol) as base_url, httpx.Client(base_url=base_url, timeout=10) as http:
        first = http.get("/test-only/port").json()["port"]
        ports = []
        for path in ["/test-only/boom", "/test-only/boom-async"] * 2:
            failed = http.get(path)
            assert failed.status_code == 500 and failed.headers["content-type"] == PROBLEM, failed.text
            assert failed.json()["type"] == "urn:ntklab:problem:internal" and "secret" not in failed.text
            assert failed.headers.get("connection", "keep-alive").lower() != "close"
            ports += [http.get("/test-only/port").json()["port"] for _ in range(9)]
        assert http.get("/v1/jobs").status_code == 200
    assert set(ports) == {first}, "every request after a 500 came on the first connection"


def test_a_test_client_that_asks_for_server_errors_still_gets_them(settings):
    app = with_failing_routes(create_app(settings))
    with TestClient(app, raise_server_exceptions=True) as client, pytest.raises(RuntimeError, match="secret"):
        client.get("/test-only/boom")
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/test-only/boom").status_code == 500
