"""How /ui/, its files and the API docs are served: from the package, under a CSP, never from a CDN."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from ntklab.config.settings import Settings
from ntklab.service.app import create_app
from ntklab.service.ui.routes import STATIC


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app without its lifespan: serving static files touches neither the database nor the broker."""
    root = tmp_path_factory.mktemp("ui-serving")
    settings = Settings(database_url=f"sqlite:///{root / 'unused.db'}", broker_url="filesystem://", broker_dir=root)
    yield TestClient(create_app(settings))


@pytest.mark.parametrize("path", ["/ui/", "/ui/js/main.js", "/ui/app.css", "/ui/vendor/echarts/echarts.esm.min.js"])
def test_the_page_and_its_files_carry_a_policy_that_allows_only_this_origin(client, path):
    answer = client.get(path)
    assert answer.status_code == 200
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_the_page_has_no_inline_script_or_style_and_loads_only_local_files(client):
    page = client.get("/ui/").text
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == [] and "<style" not in page and "style=" not in page
    assert re.findall(r'(?:src|href)="(?:https?:)?//', page) == []


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_api_docs_load_their_assets_from_the_package(client, path):
    page = client.get(path).text
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets and all(asset.startswith("/ui/vendor/") for asset in assets), assets
    assert "cdn" not in page and "fonts.googleapis" not in page
    for asset in assets:
        assert client.get(asset).status_code == 200, asset


@pytest.mark.parametrize("path", ["/ui", "/ui/js", "/ui/vendor", "/ui/../pyproject.toml", "/ui/nothing.js"])
def test_a_folder_or_a_missing_file_is_a_404_never_a_redirect_to_the_host_header(client, path):
    answer = client.get(path, headers={"host": "evil.example"}, follow_redirects=False)
    assert answer.status_code == 404 and "location" not in answer.headers


def test_every_vendored_library_ships_its_licence():
    for library in (STATIC / "vendor").iterdir():
        if library.is_dir():
            assert any(path.name.startswith("LICENSE") for path in library.iterdir()), library


def test_no_script_of_the_page_writes_html_from_strings():
    scripts = list((STATIC / "js").rglob("*.js"))
    assert scripts
    for script in scripts:
        text = script.read_text()
        assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function", text), (
            script
        )
