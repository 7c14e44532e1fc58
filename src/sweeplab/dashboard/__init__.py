"""Read-only web dashboard over a sweeplab store (extra `dashboard`: starlette, uvicorn, plotly)."""

from sweeplab.dashboard.app import create_app, serve

__all__ = ["create_app", "serve"]
