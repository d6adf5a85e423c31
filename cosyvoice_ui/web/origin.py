"""The same-origin policy of a running server: which browser pages may drive it, and which may read it.

The rules (`SameOrigin`, no server needed; `OriginGuard` applies them to every HTTP and WebSocket request):
- **Host (loopback binds).** A server bound to loopback answers only requests whose `Host` is a loopback name
  (`localhost`, `127.x.y.z`, `[::1]`), the share link's host or the host of an `--allowed-origin`. A page on
  an attacker's domain that re-points its DNS name at 127.0.0.1 (DNS rebinding) sends its own name as Host and
  is refused (421). Public binds skip this check: they need a login and a key (`web/access.py`).
- **Who may change state.** A request that can change something (any method but GET, HEAD and OPTIONS, and
  every WebSocket) from a browser page of another origin is refused (403 `cross_origin_refused`). The page's
  origin is its `Origin` header; without one, `Sec-Fetch-Site` (`same-origin` and `none` pass). A request with
  neither header comes from no browser page (curl, the openai SDK, gradio_client, Home Assistant) and passes.
  The page's own origin is the one whose host and port equal the request's `Host`; the share link's origin
  and every `--allowed-origin` are allowed too. `Origin: null` (sandboxed frames, files) never is.
- **Who may read.** Responses never pair a reflected Origin with credentials: every `Access-Control-*` header
  the app (Gradio) would send is removed, and only an `--allowed-origin` gets `Access-Control-Allow-Origin`
  (with credentials), so a foreign page cannot read `/config`, `/gradio_api/info` or a result with the login
  cookie. Preflights from other origins are answered 403 without CORS headers.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..errors import InvalidRequest

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
BROWSER_SAFE_SITES = frozenset({"same-origin", "none"})  # Sec-Fetch-Site values of the page itself or the user
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
CORS_ALLOW_METHODS = b"GET, POST, PUT, PATCH, DELETE, OPTIONS"
PREFLIGHT_MAX_AGE = b"600"


def parse_origin(value: str) -> str:
    """An `--allowed-origin` value → its canonical form `scheme://host[:port]` (lower case, no default port).
    Raises `InvalidRequest("origin_invalid")` for anything else (a path, a wildcard, another scheme)."""
    text = str(value or "").strip().rstrip("/")
    if text == "*" or "*" in text:
        raise InvalidRequest("origin_invalid", "--allowed-origin takes one origin such as https://studio.example.org; "
                             "a wildcard would let every web page use this server", origin=text)
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname \
            or parts.path or parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidRequest("origin_invalid", f"--allowed-origin {text!r} is not an origin: write the scheme, the "
                             "host and an optional port, e.g. https://studio.example.org or http://192.168.1.5:8080",
                             origin=text)
    return _canonical(parts.scheme, parts.hostname, port)


def _canonical(scheme: str, host: str, port: int | None) -> str:
    scheme, host = scheme.lower(), host.lower().strip("[]")
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" if port in (None, DEFAULT_PORTS.get(scheme)) else f"{scheme}://{shown}:{port}"


def _host_and_port(value: str, default_port: int | None = None) -> tuple[str, int | None] | None:
    """`Host`-header style `name[:port]` / `[v6]:port` → (lower-case name without brackets, port or default)."""
    value = value.strip().lower()
    if not value or any(ch in value for ch in "/\\@ \t"):
        return None
    try:
        parts = urlsplit("//" + value)
        return (parts.hostname or "").strip("[]"), parts.port if parts.port is not None else default_port
    except ValueError:
        return None


def is_loopback_host(name: str) -> bool:
    name = name.strip("[]").lower().rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_loopback_bind(host: str) -> bool:
    return is_loopback_host(host)


@dataclass(frozen=True)
class Verdict:
    """What the policy says of one request: allowed, or refused with a status, a code and a message."""

    status: int = 0  # 0: allowed
    code: str = ""
    message: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 0


ALLOWED = Verdict()


@dataclass(frozen=True)
class SameOrigin:
    """The policy (see the module docstring). `share_origin` is asked at each request: the share link's
    address is known only once its tunnel is up."""

    check_host: bool
    allowed_origins: frozenset[str] = frozenset()
    share_origin: Callable[[], str | None] = field(default=lambda: None)

    @classmethod
    def for_bind(cls, host: str, allowed_origins: Iterable[str] = (),
                 share_origin: Callable[[], str | None] | None = None) -> SameOrigin:
        return cls(check_host=is_loopback_bind(host), allowed_origins=frozenset(map(parse_origin, allowed_origins)),
                   share_origin=share_origin or (lambda: None))

    def _extra_origins(self) -> set[str]:
        origins = set(self.allowed_origins)
        share = self.share_origin()
        if share:
            try:
                origins.add(parse_origin(share))
            except InvalidRequest:
                log.debug("share link %r is not an origin", share)
        return origins

    def host_allowed(self, host_header: str) -> bool:
        parsed = _host_and_port(host_header)
        if parsed is None:
            return False
        name = parsed[0]
        if is_loopback_host(name):
            return True
        return any(urlsplit(origin).hostname == name for origin in self._extra_origins())

    def same_origin(self, origin: str, host_header: str) -> bool:
        """Whether the page `origin` is this server as the request addressed it (host and port)."""
        try:
            parts = urlsplit(origin)
            origin_port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
        except ValueError:
            return False
        if not parts.hostname or parts.scheme.lower() not in DEFAULT_PORTS:
            return False
        target = _host_and_port(host_header, origin_port)
        return target is not None and target == (parts.hostname.lower().strip("[]"), origin_port)

    def origin_allowed(self, origin: str, host_header: str) -> bool:
        if not origin or origin.strip().lower() == "null":
            return False
        if self.same_origin(origin, host_header):
            return True
        try:
            return parse_origin(origin) in self._extra_origins()
        except InvalidRequest:
            return False

    def cors_origin(self, origin: str) -> bool:
        """Whether a response to a page of `origin` may be read by it across origins (only explicit opt-ins)."""
        try:
            return bool(origin) and parse_origin(origin) in self._extra_origins()
        except InvalidRequest:
            return False

    def judge(self, method: str, headers: dict[str, str], websocket: bool = False) -> Verdict:
        host = headers.get("host", "")
        if self.check_host and not self.host_allowed(host):
            return Verdict(421, "host_not_allowed", "this server is bound to loopback and answers only requests "
                           "addressed to localhost or 127.0.0.1 (a page that re-points its own name at this machine "
                           "is refused); to serve it under another name, start it with --allowed-origin "
                           "https://that.name")
        if method.upper() in SAFE_METHODS and not websocket:
            return ALLOWED
        origin = headers.get("origin")
        if origin is not None:
            if self.origin_allowed(origin, host):
                return ALLOWED
            return Verdict(403, "cross_origin_refused", "requests from another web site's page are refused: use "
                           "this server's own page, a client without a browser (curl, the openai SDK, "
                           "gradio_client), or start the server with --allowed-origin for a site you trust")
        site = headers.get("sec-fetch-site", "").strip().lower()
        if site and site not in BROWSER_SAFE_SITES:
            return Verdict(403, "cross_origin_refused", "requests from another web site's page are refused: use "
                           "this server's own page, or a client without a browser (curl, the openai SDK)")
        return ALLOWED


def is_browser_request(headers: dict[str, str]) -> bool:
    """Sent by a web page (it carries `Origin` or a `Sec-Fetch-*` header), not by curl or an SDK."""
    return "origin" in headers or any(name.startswith("sec-fetch-") for name in headers)


# --- the middleware (ASGI) -----------------------------------------------------------------------------------


def _headers(scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def refusal_body(verdict: Verdict) -> bytes:
    return json.dumps({"error": {"code": verdict.code, "message": verdict.message, "type": "permission_error",
                                 "param": None}}).encode()


class OriginGuard:
    """Applies `SameOrigin` to every request and rewrites CORS on every response (see the module docstring)."""

    def __init__(self, app, policy: SameOrigin) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        websocket = scope["type"] == "websocket"
        method = scope.get("method", "GET")
        origin = headers.get("origin", "")
        if not websocket and method == "OPTIONS" and "access-control-request-method" in headers:
            await self._preflight(send, origin)
            return
        verdict = self.policy.judge(method, headers, websocket)
        if not verdict.allowed:
            log.info("refused %s %s: %s (origin %r)", method, scope.get("path", ""), verdict.code, origin or None)
            if websocket:
                await send({"type": "websocket.close", "code": 1008})
                return
            await _answer(send, verdict.status, refusal_body(verdict))
            return
        if websocket:
            await self.app(scope, receive, send)
            return
        readable = self.policy.cors_origin(origin)

        async def send_with_cors(message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", [])
                        if not k.lower().startswith(b"access-control-")]
                if readable:
                    kept += [(b"access-control-allow-origin", origin.encode("latin-1")),
                             (b"access-control-allow-credentials", b"true"),
                             (b"access-control-expose-headers", b"X-Seed, X-Cache, X-Sample-Rate, X-Take-Retries")]
                if origin:
                    kept.append((b"vary", b"Origin"))
                message = dict(message, headers=kept)
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def _preflight(self, send, origin: str) -> None:
        if not self.policy.cors_origin(origin):
            await _answer(send, 403, refusal_body(Verdict(403, "cross_origin_refused", "this server does not take "
                                                          "requests from other web sites' pages")))
            return
        await send({"type": "http.response.start", "status": 204, "headers": [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-allow-credentials", b"true"),
            (b"access-control-allow-methods", CORS_ALLOW_METHODS),
            (b"access-control-allow-headers", b"Authorization, X-API-Key, Content-Type"),
            (b"access-control-max-age", PREFLIGHT_MAX_AGE), (b"vary", b"Origin")]})
        await send({"type": "http.response.body", "body": b""})


async def _answer(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
