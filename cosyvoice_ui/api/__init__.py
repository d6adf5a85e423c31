"""The REST API: routes (HTTP only), schemas, the service behind them, security, streaming bodies."""

from .routes import add_docs, add_routes

__all__ = ["add_docs", "add_routes"]
