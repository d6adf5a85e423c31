"""The REST API: routes (HTTP only), schemas, the service behind them, security, streaming bodies."""

from __future__ import annotations

__all__ = ["add_docs", "add_routes"]


def __getattr__(name: str):
    # Lazy, so importing `api.service` (as the Gradio API does) does not load FastAPI.
    if name in __all__:
        from . import routes

        return getattr(routes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
