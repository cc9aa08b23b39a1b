"""Serve the dashboard's static files at /ui/ and Swagger UI / ReDoc at /docs and /redoc, all from the package.

Nothing is loaded from a CDN: the vendored libraries live in static/vendor/<lib>/ with their
licences (static/vendor/README.md records versions and the npm command). Every response
under /ui/ carries a Content-Security-Policy that allows scripts, styles, images and fetches
from this origin only, so nothing a job's name, tags or spec contains can run as code.
/docs and /redoc are FastAPI's own pages (they need one inline bootstrap script, so the
policy is not set there) pointed at the vendored assets.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC = Path(__file__).parent / "static"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; worker-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

pages = APIRouter(include_in_schema=False)


class DashboardFiles(StaticFiles):
    """StaticFiles whose every answer carries SECURITY_HEADERS. Built with html=False: a folder is a 404,
    never a redirect (Starlette would build one from the request's Host header)."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


@pages.get("/ui/")
def dashboard_page() -> FileResponse:
    return FileResponse(STATIC / "index.html", headers=SECURITY_HEADERS)


@pages.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url,
        title="ntklab API",
        swagger_js_url="/ui/vendor/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url="/ui/vendor/swagger-ui/swagger-ui.css",
        swagger_favicon_url="/ui/vendor/swagger-ui/favicon-32x32.png",
    )


@pages.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(
        openapi_url=request.app.openapi_url,
        title="ntklab API",
        redoc_js_url="/ui/vendor/redoc/redoc.standalone.js",
        redoc_favicon_url="/ui/vendor/swagger-ui/favicon-32x32.png",
        with_google_fonts=False,
    )


def install_dashboard(app: FastAPI) -> None:
    """Serve /ui/ and its files, /docs and /redoc; the app must be built with docs_url=None and redoc_url=None."""
    app.include_router(pages)
    app.mount("/ui", DashboardFiles(directory=STATIC), name="ui")
