"""The web page and JSON API (``vramfit serve``; needs the ``web`` extra: FastAPI, uvicorn, plotly)."""

from vramfit.web.app import create_app

__all__ = ["create_app"]
