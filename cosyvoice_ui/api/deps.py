"""What every group of routes shares: the service dependency, the guard every protected route runs first, and
the error statuses the guard and the upload cap add to each route's schema.

A module of its own so the route modules (`routes.py`, `routes_studio.py`) share it without importing each
other.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ..serving.audit import Caller
from .schemas import error_responses
from .security import Guard, client_address
from .service import ApiService

# Every status a route can answer is declared (the schema fuzz test holds the app to it). The guard and the
# upload cap answer 401/403/429/413 on every protected route, the origin guard 403/421 and the JSON depth cap
# 400; each route adds its own.
ERRORS = error_responses(400, 401, 403, 413, 421, 429)
# bad body, unknown voice/model, no consent for a new recording on a shared server, engine
SYNTHESIS_ERRORS = error_responses(400, 404, 415, 422, 428, 502, 503)


def api_service(request: Request) -> ApiService:
    """The service behind every route (put there by `add_routes`); where an app serves several models (a
    cluster's ingress), `app.state.select_api` picks the one the request names."""
    select = getattr(request.app.state, "select_api", None)
    return select(request) if select is not None else request.app.state.api


def client_id(request: Request) -> str:
    """Authentication, then the rate limit: the first thing every protected route runs (before its body
    is even parsed, so unauthenticated callers learn nothing). Returns the client id."""
    guard: Guard = request.app.state.api_guard
    client = guard(request.headers, client_address(request.client.host if request.client else None, request.headers))
    request.state.who = guard.who(client)  # the audit trail's name for the caller: a key id, never the key
    return client


def caller(request: Request, surface: str) -> Caller:
    """Who asks (a key id, or None on an open server) through which surface; a cluster's ingress is one surface."""
    return Caller(getattr(request.app.state, "surface", None) or surface, getattr(request.state, "who", None))


Service = Annotated[ApiService, Depends(api_service)]
PROTECTED = [Depends(client_id)]
