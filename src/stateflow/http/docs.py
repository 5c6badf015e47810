"""``/docs``: Swagger UI from assets shipped in the package (it works offline), with the bearer
scheme declared so its Authorize button sends ``Authorization: Bearer <token>``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS: Final = Path(__file__).with_name("swagger")
ASSETS_URL: Final = "/docs/assets"
BEARER: Final = "bearer"


def declare_bearer(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the bearer scheme and require it on every operation, unless already declared."""
    components = schema.setdefault("components", {})
    schemes = components.setdefault("securitySchemes", {})
    if not schemes:
        schemes[BEARER] = {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token given to `stateflow serve` (--token or STATEFLOW_TOKENS).",
        }
    schema.setdefault("security", [{name: []} for name in schemes])
    return schema


def mount_docs(app: FastAPI) -> None:
    """Serve ``/docs`` and its assets; ``app`` must be created with ``docs_url=None``."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="swagger-assets")
    build_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = declare_bearer(build_openapi())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": True},
        )
