"""REST API protection: API keys, per-client rate limit, upload size cap (the blocked-words policy is
content, not protection: `serving/content_policy.py`).

Policy:
- keys configured (`--api-key` / COSYVOICE_API_KEYS, or the one-time key the web process generates for a
  public server: `web/access.py`) → every protected route needs one (`Authorization: Bearer KEY` or
  `X-API-Key: KEY`);
- reachable from the network (non-loopback bind or `--share`) with no key and no `--no-auth` → protected
  routes refuse with 403 (fail closed: only a caller that skipped `web/access.py` gets here);
- loopback without keys, or `--no-auth` → open.
The rate limit counts requests per client (its API key, else its IP) in a sliding 60 s window. Unless
`--rate-limit` is given, it applies only to a public server: a local batch client is not throttled.
"""

from __future__ import annotations

import math
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable

from .errors import ApiError
from ..settings import Settings

API_PREFIXES = ("/tts", "/v1/")
PUBLIC_RATE_LIMIT = 60  # requests per minute per client on a public server when --rate-limit is not given


def rate_limit_of(settings: Settings) -> int:
    """The effective per-client limit: the explicit one, else PUBLIC_RATE_LIMIT when public, else none (0)."""
    if settings.rate_limit_per_min is not None:
        return settings.rate_limit_per_min
    return PUBLIC_RATE_LIMIT if settings.is_public else 0


class RateLimiter:
    """Sliding-window request counter per client id. `limit` <= 0 disables it."""

    def __init__(self, limit: int, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window_s = window_s
        self.clock = clock
        self._hits: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def hit(self, client: str) -> float | None:
        """Count one request; return None if allowed, else the seconds until the next one is."""
        if self.limit <= 0:
            return None
        now = self.clock()
        with self._lock:
            window = self._hits.setdefault(client, deque())
            while window and window[0] <= now - self.window_s:
                window.popleft()
            if len(window) >= self.limit:
                return max(0.0, window[0] + self.window_s - now)
            window.append(now)
            if len(self._hits) > 10_000:  # forget idle clients so the table cannot grow without bound
                for key in [k for k, v in self._hits.items() if not v or v[-1] <= now - self.window_s]:
                    del self._hits[key]
            return None


class FailureBackoff:
    """Per-client back-off after wrong passwords or API keys: the first `free` failures cost nothing (typos), each
    further one locks the client out for twice as long as the last (1 s, 2 s, 4 s ... up to `max_s`), and a
    success or `forget_s` without failures forgets the client. A guesser gets a few hundred tries a day instead
    of thousands a second; the table is bounded."""

    def __init__(self, free: int = 5, base_s: float = 1.0, max_s: float = 300.0, forget_s: float = 900.0,
                 clock: Callable[[], float] = time.monotonic, max_clients: int = 10_000) -> None:
        self.free, self.base_s, self.max_s, self.forget_s = free, base_s, max_s, forget_s
        self.clock = clock
        self.max_clients = max_clients
        self._clients: dict[str, tuple[int, float, float]] = {}  # client → (failures, last failure, locked until)
        self._lock = threading.Lock()

    def locked_for(self, client: str) -> float | None:
        """Seconds until `client` may try again, or None when it may now."""
        with self._lock:
            entry = self._clients.get(client)
            if entry is None:
                return None
            now = self.clock()
            if now - entry[1] > self.forget_s:
                del self._clients[client]
                return None
            return entry[2] - now if entry[2] > now else None

    def failed(self, client: str) -> float | None:
        """Count a failure; returns the lock-out it starts (None while failures are still free)."""
        now = self.clock()
        with self._lock:
            failures, last, _ = self._clients.get(client, (0, now, 0.0))
            if now - last > self.forget_s:
                failures = 0
            failures += 1
            lock = 0.0 if failures <= self.free else min(self.max_s, self.base_s * 2 ** (failures - self.free - 1))
            self._clients[client] = (failures, now, now + lock)
            if len(self._clients) > self.max_clients:
                for key in [k for k, v in self._clients.items() if now - v[1] > self.forget_s or v[2] <= now]:
                    del self._clients[key]
            return lock or None

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._clients.pop(client, None)


def client_address(peer: str | None, headers) -> str:
    """Who is asking, for back-off and rate limits: the peer's address, or, when the peer is this machine (the
    share tunnel, a reverse proxy on loopback), the address that proxy put last in X-Forwarded-For (the ones
    before it are the client's own words)."""
    peer = peer or "unknown"
    if peer in ("127.0.0.1", "::1") or peer.startswith("127."):
        forwarded = [part.strip() for part in str(headers.get("x-forwarded-for") or "").split(",") if part.strip()]
        if forwarded:
            return forwarded[-1][:64]
    return peer


def retry_message(what: str, seconds: float) -> tuple[str, dict[str, str]]:
    """The words and the Retry-After header of a back-off refusal."""
    wait = max(1, math.ceil(seconds))
    return (f"too many wrong {what} from this address: wait {wait} s before the next try (each further wrong try "
            "doubles the wait)", {"Retry-After": str(wait)})


def request_key(headers: dict[str, str] | object) -> str | None:
    """The API key a request carries (Bearer token or X-API-Key), or None."""
    auth = headers.get("authorization") or ""
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    key = headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


def key_id(keys: tuple[str, ...], key: str) -> str | None:
    """A key's id: `key-N`, N its place among the server's keys (the `--api-key` flags in order, then
    COSYVOICE_API_KEYS; a generated key is key-1). Names who used a key in logs and records without the key."""
    for index, known in enumerate(keys, start=1):
        if secrets.compare_digest(key.encode(), known.encode()):
            return f"key-{index}"
    return None


class Guard:
    """The check every protected route runs first: authentication, then the rate limit."""

    def __init__(self, settings: Settings, limiter: RateLimiter | None = None,
                 backoff: FailureBackoff | None = None) -> None:
        self.keys = tuple(k for k in settings.api_keys if k)
        self.public = settings.is_public
        self.open = settings.no_auth
        self.limiter = limiter or RateLimiter(rate_limit_of(settings))
        self.backoff = backoff or FailureBackoff()  # wrong keys (shared with the login form and Gradio's API)

    @property
    def refuses_all(self) -> bool:
        """True when reachable from the network with no key configured and no --no-auth."""
        return self.public and not self.keys and not self.open

    def authenticate(self, headers, client_host: str | None) -> str:
        """Return the client id (for rate limiting) or raise ApiError 401/403."""
        if self.refuses_all:
            raise ApiError(403, "api_key_required", "this server is reachable from the network but has no API key, "
                           "so the REST API is off: restart it with --api-key KEY (or set COSYVOICE_API_KEYS) and "
                           "send 'Authorization: Bearer KEY', or with --no-auth to open it to anyone")
        key = request_key(headers)
        if self.keys:
            if key is None:
                raise ApiError(401, "api_key_missing", "this server needs an API key: send 'Authorization: Bearer "
                               "KEY' or 'X-API-Key: KEY'", {"WWW-Authenticate": "Bearer"})
            address = "ip:" + (client_host or "unknown")
            locked = self.backoff.locked_for(address)
            if locked is not None:
                message, retry = retry_message("API keys", locked)
                raise ApiError(429, "auth_backoff", message, retry)
            if not self.accepts(key):
                self.backoff.failed(address)
                raise ApiError(401, "api_key_invalid", "the API key is not valid for this server",
                               {"WWW-Authenticate": "Bearer"})
            self.backoff.succeeded(address)
            return "key:" + key
        return "ip:" + (client_host or "unknown")

    def accepts(self, key: str) -> bool:
        return any(secrets.compare_digest(key.encode(), k.encode()) for k in self.keys)

    def who(self, client: str) -> str | None:
        """The audit trail's name for a client `authenticate` returned: its key's id, never the key (None: none)."""
        return key_id(self.keys, client[4:]) if client.startswith("key:") else None

    def __call__(self, headers, client_host: str | None) -> str:
        client = self.authenticate(headers, client_host)
        retry = self.limiter.hit(client)
        if retry is not None:
            seconds = max(1, math.ceil(retry))
            raise ApiError(429, "rate_limited", f"too many requests: the limit is {self.limiter.limit} per minute "
                           f"per client; retry in {seconds} s", {"Retry-After": str(seconds)})
        return client


# --- JSON nesting cap (ASGI middleware) -------------------------------------------------------------------

MAX_JSON_DEPTH = 64  # our bodies nest 4 levels deep; Python's decoder gives up near 1000 with a RecursionError
_STRUCTURE = re.compile(rb'[\[\]{}"\\]')


def json_depth(body: bytes, stop_at: int = MAX_JSON_DEPTH) -> int:
    """How deep the arrays and objects of a JSON text nest (strings skipped), counted in one pass; stops
    early once past `stop_at`. Linear in the body's length."""
    if body.count(b"[") + body.count(b"{") <= stop_at:  # cannot be deeper than its brackets: the common case
        return 0
    depth = deepest = 0
    in_string = escaped = False
    for match in _STRUCTURE.finditer(body):
        char = match.group(0)
        if in_string:
            if escaped:
                escaped = False
            elif char == b"\\":
                escaped = match.end() < len(body)  # the next byte is escaped: look at it only if it is structural
                if escaped and body[match.end():match.end() + 1] not in b'[]{}"\\':
                    escaped = False
            elif char == b'"':
                in_string = False
        elif char == b'"':
            in_string = True
        elif char in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_at:
                    return deepest
        elif char in (b"]", b"}"):
            depth -= 1
    return deepest


class JsonDepthLimit:
    """Refuses a JSON body nested deeper than MAX_JSON_DEPTH with a 400 before any route parses it (Python's
    decoder would raise a RecursionError, a 500, on hand-parsed routes). Runs inside the upload cap, so the
    body it holds is bounded; a long body is scanned in a worker thread, off the event loop."""

    def __init__(self, app, prefixes: tuple[str, ...] = API_PREFIXES, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.app = app
        self.prefixes = prefixes
        self.max_depth = max_depth

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH") \
                or not scope["path"].startswith(self.prefixes) or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if len(body) > 65536:
            from anyio import to_thread

            depth = await to_thread.run_sync(json_depth, body, self.max_depth)
        else:
            depth = json_depth(body, self.max_depth)
        if depth > self.max_depth:
            await _json_error(send, 400, "json_too_deep", f"the JSON body nests arrays or objects more than "
                              f"{self.max_depth} levels deep; send the flat shape the API documents (GET /docs)")
            return
        await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)


def _is_json(scope) -> bool:
    for key, value in scope.get("headers", []):
        if key.lower() == b"content-type":
            kind = value.split(b";")[0].strip().lower()
            return kind == b"application/json" or kind.endswith(b"+json")
    return False


async def _json_error(send, status: int, code: str, message: str) -> None:
    import json

    body = json.dumps({"error": {"code": code, "message": message, "type": "invalid_request_error",
                                 "param": None}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


# --- upload size cap (ASGI middleware) --------------------------------------------------------------------


class UploadLimit:
    """Rejects API request bodies over `max_bytes` with 413 before any endpoint parses them.

    Checks Content-Length when present; a chunked body is read up to the limit and then replayed.
    Other paths (the Gradio UI has its own `max_file_size`) pass through untouched.

    A refused body is read and dropped (up to `drain_bytes`) before the 413 goes out: a server that
    closes a connection with unread data makes the kernel reset it, and a client still sending then gets
    a broken pipe instead of the answer. A client that sent `Expect: 100-continue` has sent nothing yet.
    """

    def __init__(self, app, max_bytes: int, prefixes: tuple[str, ...] = API_PREFIXES,
                 drain_bytes: int | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.prefixes = prefixes
        # dropping bytes costs no memory, only time: bounded, so a huge body cannot hold a worker for long
        self.drain_bytes = drain_bytes if drain_bytes is not None else max(4 * max_bytes, 64 * 2**20)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefixes) or self.max_bytes <= 0:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit() or int(length) > self.max_bytes:
                if length.isdigit() and int(length) <= self.drain_bytes and not _expects_continue(headers):
                    await _drain(receive, self.drain_bytes)
                await self._reject(send)
                return
            await self.app(scope, receive, send)
            return
        if scope.get("method") in ("GET", "HEAD", "DELETE", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                if more and not _expects_continue(headers):
                    await _drain(receive, self.drain_bytes - len(body))
                await self._reject(send)
                return
        await self.app(scope, _replay([{"type": "http.request", "body": bytes(body), "more_body": False}], receive),
                       send)

    async def _reject(self, send) -> None:
        import json

        limit_mb = self.max_bytes / 2**20
        payload = json.dumps({"error": {"code": "payload_too_large", "message": f"the request body is larger than "
                                        f"the {limit_mb:g} MB limit (--max-upload-mb); send a shorter recording",
                                        "type": "invalid_request_error", "param": None}})
        body = payload.encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _expects_continue(headers: dict[str, str]) -> bool:
    """The client waits for "100 Continue" before sending the body (curl does for large ones)."""
    return headers.get("expect", "").strip().lower() == "100-continue"


async def _drain(receive, limit: int) -> None:
    """Read and drop the rest of a request body, at most `limit` bytes (stops when the client leaves)."""
    dropped = 0
    while dropped <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return
        dropped += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _replay(messages: list[dict], then=None):
    queue = list(messages)

    async def receive() -> dict:
        if queue:
            return queue.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive
