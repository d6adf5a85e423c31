"""Who may use a running server: the login and API-key policy, the guard on Gradio's own API, security
headers, and the sweep of old generated files.

Policy (`resolve_access`, no server needed):
- loopback bind, no `--share`: open unless `--auth` / `--api-key` are given (as before);
- `--share` or a non-loopback bind: the UI needs a login and the REST API a key. What the flags do not
  give is generated for this run (user `studio` + a random password; a random key) and printed once;
- `--no-auth` serves a public bind with nothing generated (a loud warning); given credentials still apply.

Gradio's `auth` guards most of its routes, not all (its MCP endpoint has none), so `GradioApiGate` refuses
every `/gradio_api/...` request without a UI session or an API key while a login is required; a valid key
(`Authorization: Bearer KEY` or `X-API-Key`) is let in as if logged in, so scripts need no password.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from ..api.security import FailureBackoff, client_address, key_id, request_key, retry_message
from ..settings import Settings

log = logging.getLogger(__name__)

LOGIN_USER = "studio"
KEY_USER = "api-key"  # the Gradio user name of a key holder whose key has no id (`key_id`: key-1, key-2, ...)
GRADIO_API = "/gradio_api/"
GRADIO_CONFIG = ("/config", "/config/")  # the app's description, outside /gradio_api/
# Left to Gradio before login: its own check answers "not logged in" (the login page itself asks nothing
# under /gradio_api/; checked in Chromium), and the theme is no secret.
LOGIN_PAGE_API = frozenset({"/gradio_api/login_check", "/gradio_api/login_check/", "/gradio_api/theme.css"})
SWEEP_EVERY_S = 15 * 60
GENERATED_NAME = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}\.[a-z0-9]+$")  # how handlers and api_tools name results


@dataclass(frozen=True)
class Access:
    """The effective credentials of one run."""

    logins: tuple[tuple[str, str], ...]  # the UI's user:password pairs (empty: no login)
    keys: tuple[str, ...]  # REST (and Gradio API) keys (empty: no key)
    public: bool
    no_auth: bool = False
    generated_login: tuple[str, str] | None = None
    generated_key: str | None = None

    @property
    def login_required(self) -> bool:
        return bool(self.logins)

    def accepts_key(self, key: str) -> bool:
        return any(secrets.compare_digest(key.encode(), k.encode()) for k in self.keys)

    def key_id(self, key: str) -> str | None:
        """The key's id (`key-N`), the name its holder runs as in Gradio and in the audit trail."""
        return key_id(self.keys, key)

    def applied(self, settings: Settings) -> Settings:
        """`settings` with these credentials, for the parts that read them (Guard, Gradio auth, notices)."""
        return settings.with_(auth=self.logins, api_keys=self.keys)


def new_secret() -> str:
    """96 random bits, URL-safe; never starting with '-' (it would read as a flag when pasted into a command)."""
    while (secret := secrets.token_urlsafe(12)).startswith("-"):
        pass
    return secret


def resolve_access(settings: Settings, token=new_secret) -> Access:
    """Decide the logins and keys of a run; generates what a public server lacks (unless `--no-auth`)."""
    logins, keys = tuple(settings.auth), tuple(k for k in settings.api_keys if k)
    public, generate = settings.is_public, settings.is_public and not settings.no_auth
    generated_login = (LOGIN_USER, token()) if generate and not logins else None
    generated_key = token() if generate and not keys else None
    return Access(logins=logins or ((generated_login,) if generated_login else ()),
                  keys=keys or ((generated_key,) if generated_key else ()), public=public,
                  no_auth=settings.no_auth, generated_login=generated_login, generated_key=generated_key)


def _boxed(lines: list[str]) -> str:
    width = max(len(line) for line in lines)
    rule = "+" + "-" * (width + 2) + "+"
    return "\n".join([rule, *(f"| {line.ljust(width)} |" for line in lines), rule])


def console_message(settings: Settings, access: Access) -> str | None:
    """What the console shows at start: the one-time credentials, or the no-login warning (None: nothing)."""
    if not access.public:
        return None
    where = "a public share link" if settings.share else f"{settings.host}:{settings.port}"
    if access.no_auth and not (access.logins and access.keys):
        open_parts = [part for part, closed in (("the web UI", access.logins), ("the REST API", access.keys))
                      if not closed]
        return _boxed([f"WARNING: --no-auth: {' and '.join(open_parts)} on {where} need no login or key.",
                       "Anyone who can reach the address can clone voices on this machine.",
                       "Restart without --no-auth to get a one-time login, or set --auth USER:PASS / --api-key KEY."])
    if not (access.generated_login or access.generated_key):
        return None
    lines = [f"This server is reachable from the network ({where}): a login is required.",
             "Generated for this run only (printed once, not stored):", ""]
    if access.generated_login:
        user, password = access.generated_login
        lines += [f"  web UI login:  user {user}   password {password}"]
    if access.generated_key:
        lines += [f"  API key:       {access.generated_key}",
                  "                 (REST and gradio_client: send 'Authorization: Bearer KEY')"]
    lines += ["", "Set your own with --auth USER:PASS (or --auth-file) and --api-key KEY;",
              "--no-auth serves without any (anyone who can reach it could use it)."]
    return _boxed(lines)


# --- the guard on Gradio's API (ASGI) ----------------------------------------------------------------


class GradioSessions:
    """Reads and makes Gradio login sessions (its `tokens` table and cookie names, Gradio 6)."""

    def __init__(self, gradio_app) -> None:
        self.app = gradio_app
        self.key_tokens: dict[str, str] = {}  # user name (a key's id) → its session token

    def _names(self) -> tuple[str, str]:
        cookie_id = self.app.cookie_id
        return f"access-token-{cookie_id}", f"access-token-unsecure-{cookie_id}"

    def logged_in(self, cookie_header: str) -> bool:
        from starlette.requests import cookie_parser

        cookies = cookie_parser(cookie_header) if cookie_header else {}
        return any(cookies.get(name) in self.app.tokens for name in self._names() if cookies.get(name))

    def key_cookie(self, user: str | None = None) -> bytes:
        """The cookie that makes Gradio see a key holder as logged in as `user`, the key's id, so handlers and the
        audit trail know which key it was without the key (re-registered: a logout may drop it)."""
        user = user or KEY_USER
        token = self.key_tokens.setdefault(user, secrets.token_urlsafe(32))
        self.app.tokens[token] = user
        return f"{self._names()[1]}={token}".encode()


def gradio_app_of(app):
    """The Gradio app `gr.mount_gradio_app` mounted into `app`."""
    from starlette.routing import Mount

    return next(route.app for route in app.routes if isinstance(route, Mount) and hasattr(route.app, "tokens"))


def _error_body(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "type": "authentication_error",
                                 "param": None}}).encode()


class GradioApiGate:
    """While a login is required, `/gradio_api/...` needs a UI session or a valid API key (401 otherwise)."""

    def __init__(self, app, access: Access, sessions: GradioSessions, backoff: FailureBackoff | None = None) -> None:
        self.app = app
        self.access = access
        self.sessions = sessions
        self.backoff = backoff or FailureBackoff()

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not self.access.login_required or path in LOGIN_PAGE_API:
            await self.app(scope, receive, send)
            return
        gated = path.startswith(GRADIO_API) or path in GRADIO_CONFIG
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        key = request_key(headers)
        address = "ip:" + client_address((scope.get("client") or ("",))[0], headers)
        if key is not None and (locked := self.backoff.locked_for(address)) is not None:
            message, retry = retry_message("API keys", locked)
            await _refuse(send, "auth_backoff", message, 429, retry)
            return
        if key is not None and self.access.accepts_key(key):  # everywhere: gradio_client asks /config first
            self.backoff.succeeded(address)
            await self.app(_with_cookie(scope, self.sessions.key_cookie(self.access.key_id(key))), receive, send)
            return
        if not gated:  # the page, its assets and the REST API (whose Guard checks keys itself)
            await self.app(scope, receive, send)
            return
        if key is not None:
            self.backoff.failed(address)
            await _refuse(send, "api_key_invalid", "the API key is not valid for this server")
            return
        if self.sessions.logged_in(headers.get("cookie", "")):
            await self.app(scope, receive, send)
            return
        how = (" or send an API key ('Authorization: Bearer KEY')" if self.access.keys else "")
        await _refuse(send, "login_required", "this server needs a login: sign in on its web page (gradio_client: "
                      f"Client(url, auth=(user, password))){how}")


def _with_cookie(scope, cookie: bytes):
    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"cookie"]
    existing = b"; ".join(v for k, v in scope.get("headers", []) if k.lower() == b"cookie")
    return dict(scope, headers=headers + [(b"cookie", existing + b"; " + cookie if existing else cookie)])


async def _refuse(send, code: str, message: str, status: int = 401, headers: dict[str, str] | None = None) -> None:
    extra = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    challenge = [(b"www-authenticate", b"Bearer")] if status == 401 else []
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *challenge, *extra]})
    await send({"type": "http.response.body", "body": _error_body(code, message)})


LOGIN_PATHS = ("/login", "/login/")


class LoginBackoff:
    """The login form's back-off: a client that keeps sending wrong passwords to `/login` waits longer after
    each one (`FailureBackoff`, shared with wrong API keys); while it waits it gets 429 with Retry-After and the
    password is not even checked. A right password clears it."""

    def __init__(self, app, backoff: FailureBackoff) -> None:
        self.app = app
        self.backoff = backoff

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in LOGIN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        address = "ip:" + client_address((scope.get("client") or ("",))[0], headers)
        locked = self.backoff.locked_for(address)
        if locked is not None:
            message, retry = retry_message("passwords", locked)
            body = json.dumps({"detail": message}).encode()  # Gradio's login page shows `detail`
            await send({"type": "http.response.start", "status": 429, "headers": [
                (b"content-type", b"application/json"), (b"retry-after", retry["Retry-After"].encode())]})
            await send({"type": "http.response.body", "body": body})
            return

        async def watch(message) -> None:
            if message["type"] == "http.response.start":
                if message["status"] == 200:
                    self.backoff.succeeded(address)
                elif 400 <= message["status"] < 500:
                    self.backoff.failed(address)
            await send(message)

        await self.app(scope, receive, watch)


# --- security headers (ASGI, the whole app) ------------------------------------------------------------

SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"strict-origin-when-cross-origin"),
    (b"x-frame-options", b"SAMEORIGIN"),
    # the clone tab records voice samples, so the page itself may use the microphone; nothing else may
    (b"permissions-policy", b"microphone=(self), camera=(), geolocation=(), payment=(), usb=()"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
HSTS = (b"strict-transport-security", b"max-age=31536000")
DEFAULT_RETRY_AFTER = b"5"  # for a 429 whose sender did not say when to retry


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every HTTP response (a header the route set wins); HSTS over https only;
    every 429 carries Retry-After."""

    def __init__(self, app, hsts: bool = False) -> None:
        self.app = app
        self.hsts = hsts

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers_in = dict((k.lower(), v) for k, v in scope.get("headers", []))
        https = scope.get("scheme") == "https" or headers_in.get(b"x-forwarded-proto", b"").lower() == b"https"
        extra = SECURITY_HEADERS + ((HSTS,) if https or self.hsts else ())

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in extra if k not in present]
                if message["status"] == 429 and b"retry-after" not in present:
                    headers.append((b"retry-after", DEFAULT_RETRY_AFTER))
                message = dict(message, headers=headers)
            await send(message)

        await self.app(scope, receive, send_with_headers)


# --- old generated files ----------------------------------------------------------------------------


def sweep_outputs(folder: Path, max_age_s: float, now: float | None = None) -> int:
    """Delete the results this app wrote into `folder` (its own names only, top level: the example voices
    in subfolders stay) last modified more than `max_age_s` ago. Returns how many went."""
    now = time.time() if now is None else now
    removed = 0
    try:
        entries = list(Path(folder).iterdir())
    except OSError:  # not created yet, or unreadable: nothing to sweep
        return 0
    for path in entries:
        try:
            if GENERATED_NAME.match(path.name) and path.is_file() and now - path.stat().st_mtime > max_age_s:
                path.unlink()
                removed += 1
        except OSError:  # in use or already gone: the next sweep tries again
            log.debug("could not remove %s", path.name, exc_info=True)
    return removed


def sweep_period(max_age_s: float) -> float:
    """How often to sweep: every SWEEP_EVERY_S, or more often when files live shorter than that."""
    return max(1.0, min(float(SWEEP_EVERY_S), max_age_s))


def add_sweeper(app, folder: Path, max_age_s: float) -> None:
    """Run `sweep_outputs` while `app` serves (started and stopped with its lifespan)."""
    previous = app.router.lifespan_context
    every = sweep_period(max_age_s)

    async def sweep_forever() -> None:
        while True:
            try:
                removed = await asyncio.to_thread(sweep_outputs, folder, max_age_s)
                if removed:
                    log.info("removed %d generated files older than %.0f min", removed, max_age_s / 60)
            except Exception:  # housekeeping must never stop the server
                log.warning("sweeping old generated files failed", exc_info=True)
            await asyncio.sleep(every)

    @contextlib.asynccontextmanager
    async def lifespan(a):
        async with previous(a) as state:
            task = asyncio.create_task(sweep_forever())
            try:
                yield state
            finally:
                task.cancel()

    app.router.lifespan_context = lifespan
