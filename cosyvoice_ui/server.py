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

from .manager import ModelManager, default_model_id
from .settings import Settings

log = logging.getLogger(__name__)


@dataclass
class ShareStatus:
    """What happened to the public link (shown in the UI and printed)."""

    url: str | None = None
    error: str | None = None
    pending: bool = False
    done: threading.Event = field(default_factory=threading.Event)


def create_manager(settings: Settings) -> ModelManager:
    from .manager import load_any

    model_id = default_model_id(settings.model_dir, settings.models_dir)

    def loader(mid: str, progress):
        return load_any(mid, progress, device=settings.device, precision=settings.precision,
                        max_text_chars=settings.max_text_chars, voices_dir=settings.voices_dir)

    return ModelManager(model_id, loader=loader, idle_unload_s=settings.idle_unload_s,
                        concurrency=settings.concurrency, models_dir=settings.models_dir)


def public_warning(settings: Settings) -> str | None:
    if settings.is_public and not settings.auth:
        where = "a public share link" if settings.share else f"{settings.host}:{settings.port}"
        return (f"WARNING: the app is reachable through {where} without a password; anyone with the address can "
                "use it. Add --auth user:password (and --api-key for the REST API).")
    return None


def create_app(settings: Settings, manager: ModelManager | None = None, share: ShareStatus | None = None):
    """The FastAPI app with the REST routes and the UI mounted at `/`."""
    import gradio as gr
    from fastapi import FastAPI

    from .ui.layout import build_ui
    from .ui.strings import i18n

    manager = manager or create_manager(settings)
    app = FastAPI(title="CosyVoice Studio API", docs_url="/docs", redoc_url=None)
    app.state.manager = manager
    app.state.settings = settings
    try:
        from .api import add_routes
    except ImportError:  # the REST API module is optional while it is being built
        add_routes = None
    if add_routes is not None:
        add_routes(app, manager, settings)
    output_dir = Path(settings.extra.get("output_dir", "outputs"))
    demo = build_ui(manager, settings, output_dir=output_dir, share=share)
    auth = list(settings.auth) or None
    return gr.mount_gradio_app(app, demo, path="/", auth=auth, i18n=i18n(), allowed_paths=[str(output_dir)],
                               max_file_size=f"{int(settings.max_upload_mb)}mb", footer_links=["api", "settings"])


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


def serve(settings: Settings) -> int:
    import uvicorn

    if settings.threads:
        import torch

        torch.set_num_threads(settings.threads)
    warning = public_warning(settings)
    if warning:
        print(warning, file=sys.stderr)
    share = ShareStatus()
    manager = create_manager(settings)
    app = create_app(settings, manager, share)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning")
    server = uvicorn.Server(config)
    if settings.share:
        def after_start() -> None:
            while not server.started and not server.should_exit:
                time.sleep(0.1)
            if server.started:
                start_share_tunnel(settings, share)

        threading.Thread(target=after_start, name="share-tunnel", daemon=True).start()
    print(f"CosyVoice Studio on http://{settings.host}:{settings.port} (model: {Path(manager.model_id).name})",
          file=sys.stderr)
    try:
        server.run()
    finally:
        manager.shutdown()
    return 0
