"""One process, one FastAPI app: the Gradio UI mounted at `/`, the REST API beside it, one
ModelManager shared by both. Serves with uvicorn; `--share` adds a public tunnel when it can.
"""

from __future__ import annotations

import logging
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..serving.backends import default_model_id
from ..serving.manager import SHUTDOWN_WAIT_S, ModelManager
from ..serving.memory import set_compute_threads
from ..settings import Settings
from .gradio_errors import GradioErrorText
from .origin import OriginGuard, SameOrigin
from .access import (Access, GradioApiGate, GradioSessions, LoginBackoff, SecurityHeaders, add_sweeper, console_message,
                     gradio_app_of, resolve_access, sweep_period)

log = logging.getLogger(__name__)


@dataclass
class ShareStatus:
    """What happened to the public link (shown in the UI and printed)."""

    url: str | None = None
    error: str | None = None
    pending: bool = False
    done: threading.Event = field(default_factory=threading.Event)


def create_manager(settings: Settings) -> ModelManager:
    """The process's manager; every engine it loads gets the saved voices registered.

    With `settings.engine_url` (thin client) the model is the remote instance; the other choices
    (e.g. the offline default) still load locally.
    """
    from ..serving.backends import describe, load_any
    from ..serving.voice_service import register_all
    from ..serving.voices import VoiceLibrary

    library = VoiceLibrary(settings.voices_dir, settings.max_voices)

    def on_load(engine) -> None:
        register_all(engine, library)

    if not settings.engine_url:
        model_id = default_model_id(settings.model_dir, settings.models_dir)
        return ModelManager(model_id, idle_unload_s=settings.idle_unload_s, concurrency=settings.concurrency,
                            models_dir=settings.models_dir, on_load=on_load, load_options=settings.load_options())

    from ..serving.remote import RemoteEngine, describe_remote

    from ..redact import public_url

    url = settings.engine_url.rstrip("/")
    shown = public_url(url)  # the model's id everywhere it is shown; `url` (with any user:pass@) only connects
    key = settings.api_keys[0] if settings.api_keys else None

    def loader(mid: str, options, progress):
        if mid == shown:
            return RemoteEngine(url, api_key=key, max_text_chars=options.max_text_chars, progress=progress)
        return load_any(mid, options, progress)

    def describe_model(mid: str):
        return describe_remote(url, key) if mid == shown else describe(mid)

    return ModelManager(shown, loader=loader, idle_unload_s=settings.idle_unload_s, concurrency=settings.concurrency,
                        models_dir=None, on_load=on_load, describe_model=describe_model,
                        load_options=settings.load_options())


def create_app(settings: Settings, manager: ModelManager | None = None, share: ShareStatus | None = None,
               access: Access | None = None):
    """The FastAPI app with the REST routes and the UI mounted at `/`. `access` (default: resolved from
    `settings`, generating what a public server lacks) decides the UI logins and API keys."""
    import gradio as gr
    from fastapi import FastAPI

    from ..ui.assets import page_css, page_js
    from ..ui.layout import build_ui
    from ..ui.strings import i18n

    access = access or resolve_access(settings)
    check_mcp(settings, access)
    manager = manager or create_manager(settings)  # before `applied`: a thin client's key is the remote's
    settings = access.applied(settings)
    from ..api.routes import add_docs, add_routes

    app = FastAPI(title="CosyVoice Studio API", docs_url=None, redoc_url=None)
    app.state.manager = manager
    app.state.settings = settings
    app.state.access = access
    service = add_routes(app, manager, settings)
    add_docs(app)
    output_dir = Path(settings.extra.get("output_dir", "outputs"))
    from ..serving.voices import VoiceLibrary

    voices = VoiceLibrary(settings.voices_dir, settings.max_voices)
    demo = build_ui(manager, settings, output_dir=output_dir, voices=voices, share=share,
                    service=service)
    auth = list(settings.auth) or None
    max_age_s = settings.temp_max_age_min * 60
    if max_age_s > 0:  # Gradio's uploads and copies of results (ours in output_dir: results_max_age_min)
        demo.delete_cache = (int(sweep_period(max_age_s)), int(max_age_s))
    # Gradio serves its own cache and allowed_paths (results, and the studio's takes, samples and exports); the saved
    # voices and models are never files to hand out
    blocked = [str(Path(folder).resolve()) for folder in (settings.voices_dir, settings.models_dir) if folder]
    blocked += audit_files(settings)  # the audit trail is the owner's, never a file to hand out
    hint = "Sign in with the login printed in the server's console at start." if access.generated_login else None
    served = [str(output_dir.resolve()), str(Path(settings.projects_dir).resolve())]
    app = gr.mount_gradio_app(app, demo, path="/", auth=auth, auth_message=hint, i18n=i18n(),
                              allowed_paths=served, blocked_paths=blocked,
                              max_file_size=f"{int(settings.max_upload_mb)}mb", footer_links=["api", "settings"],
                              mcp_server=settings.mcp, css=page_css(), js=page_js())
    # Only launch() sets this; while it is False, Gradio skips its check that a file an event receives was
    # uploaded to it, so a crafted request could make the app read any file on the server as "audio".
    demo.has_launched = True
    app.add_middleware(GradioErrorText, roots=lambda: data_roots(settings, output_dir))
    backoff = app.state.api_guard.backoff  # one count of wrong keys and passwords per client
    app.add_middleware(GradioApiGate, access=access, sessions=GradioSessions(gradio_app_of(app)), backoff=backoff)
    app.add_middleware(LoginBackoff, backoff=backoff)
    app.add_middleware(OriginGuard, policy=same_origin_policy(settings, share))
    app.add_middleware(SecurityHeaders, hsts=settings.share)  # outermost: refusals get the headers too
    if settings.results_max_age_min > 0:
        add_sweeper(app, output_dir, settings.results_max_age_min * 60)
    if settings.mcp:
        from ..errors import ConfigError
        from ..ui.api_tools import forward_mcp_credentials, restrict_mcp_tools

        if not demo.mcp_server:
            raise ConfigError(f"--mcp: the MCP server could not start ({demo.mcp_error})")
        restrict_mcp_tools(demo)
        forward_mcp_credentials(demo)
    return app


def audit_files(settings: Settings) -> list[str]:
    """The audit trail's file and its rotated copies (none without a trail)."""
    from ..serving.audit import BACKUPS

    path = settings.audit_path
    if path is None:
        return []
    path = Path(path).resolve()
    return [str(path)] + [str(path.with_name(f"{path.name}.{n}")) for n in range(1, BACKUPS + 1)]


def data_roots(settings: Settings, output_dir: Path) -> tuple[str, ...]:
    """The folders a message may name things relative to (the working, models and data folders, Gradio's temp)."""
    import tempfile

    folders = (Path.cwd(), settings.models_dir, settings.voices_dir, settings.projects_dir, settings.glossary_dir,
               output_dir, Path(tempfile.gettempdir()))
    return tuple(str(Path(f).resolve()) for f in folders if f)


def same_origin_policy(settings: Settings, share: ShareStatus | None = None) -> SameOrigin:
    """The process's same-origin policy: its bind, `--allowed-origin`, and the share link once it is up."""
    return SameOrigin.for_bind(settings.host, settings.allowed_origins,
                               share_origin=(lambda: share.url) if share is not None else None)


def check_mcp(settings: Settings, access: Access | None = None) -> None:
    """Refuse `--mcp` where it cannot work, before anything is built (raises ConfigError)."""
    import importlib.util

    from ..errors import ConfigError

    if not settings.mcp:
        return
    access = access or resolve_access(settings)
    # MCP clients cannot log in; with a login they get in only with an API key (GradioApiGate)
    if access.login_required and not access.keys:
        raise ConfigError("--mcp cannot be combined with --auth unless an API key is set too: MCP clients cannot "
                          "log in to the app. Add --api-key KEY (MCP clients then send 'Authorization: Bearer "
                          "KEY'), or serve MCP from a separate instance without --auth on --host 127.0.0.1")
    if importlib.util.find_spec("mcp") is None:
        raise ConfigError("--mcp needs the `mcp` package, which is not installed: run pip install -r "
                          "requirements.txt (or pip install mcp==1.30.0)")


def start_share_tunnel(settings: Settings, status: ShareStatus) -> None:
    """Open a *.gradio.live tunnel to the local server; on failure say why and keep serving locally."""
    status.pending = True
    try:
        from gradio import networking

        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
        status.url = networking.setup_tunnel(host, settings.port, secrets.token_urlsafe(32), None, None)
        print(f"Public link: {status.url}", file=sys.stderr)
    except Exception as exc:  # download of the tunnel client, network, antivirus...
        status.error = (f"Could not create the public share link ({type(exc).__name__}: {exc}). The app keeps "
                        f"serving locally at http://{settings.host}:{settings.port}.")
        print(status.error, file=sys.stderr)
    finally:
        status.pending = False
        status.done.set()


def graceful_server(config, manager: ModelManager):
    """A uvicorn server for a clean stop on SIGTERM/SIGINT: the manager refuses new jobs at once (503 +
    Retry-After) while uvicorn lets running requests finish, and `serve` then returns (exit code 0).

    Stock uvicorn re-raises the signal after its shutdown, which kills the process before the manager is
    released and makes a clean stop look like a crash (exit 143)."""
    import contextlib
    import signal

    import uvicorn
    from uvicorn.server import HANDLED_SIGNALS

    class GracefulServer(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            manager.begin_shutdown()
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED_SIGNALS}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return GracefulServer(config)


def serve(settings: Settings) -> int:
    import uvicorn

    set_compute_threads(settings.threads)
    access = resolve_access(settings)
    message = console_message(settings, access)
    if message:  # the one place the generated login and key are shown (never logged)
        print(message, file=sys.stderr)
    share = ShareStatus()
    manager = create_manager(settings)
    app = create_app(settings, manager, share, access)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning")
    server = graceful_server(config, manager)
    if settings.share:
        def after_start() -> None:
            while not server.started and not server.should_exit:
                time.sleep(0.1)
            if server.started:
                start_share_tunnel(settings, share)

        threading.Thread(target=after_start, name="share-tunnel", daemon=True).start()
    default = app.state.api.default_voice()
    print(f"CosyVoice Studio on http://{settings.host}:{settings.port} (model: {Path(manager.model_id).name}, "
          f"default voice: {default.id if default else 'none'})", file=sys.stderr)
    if settings.audit_path is not None or app.state.api.speech.consent.required:
        trail = settings.audit_path.as_posix() if settings.audit_path is not None else "off"
        consent = "asked for new recordings" if app.state.api.speech.consent.required else "not asked"
        print(f"Speaker consent: {consent}; audit trail: {trail}", file=sys.stderr)
    from ..serving.watermarking import announce

    announce(settings)  # one warning when outputs will not carry the watermark, and why
    if settings.mcp:
        print(f"MCP tools (synthesize, list_voices, save_voice): http://{settings.host}:{settings.port}"
              "/gradio_api/mcp/", file=sys.stderr)
    try:
        server.run()
    finally:
        # A second Ctrl+C (force exit) means now: running jobs are not waited for then.
        manager.shutdown(wait_s=0.0 if server.force_exit else SHUTDOWN_WAIT_S)
    return 0
