"""The cluster's HTTP front: the app's own REST routes, schemas, keys and limits, over engine replicas.

One `ApiService` per served model, each over a `ModelManager` whose engine is a `ClusterEngine` (so the queue,
the result cache, validation, take checks, glossaries and subtitles are exactly the single-process app's). A
request picks its model by `model` in its JSON body (or an `X-Model` header); without one, the first model
serves. Saved voices live in the shared voices folder, so every ingress and replica sees the same voices.

What stays per ingress replica: the result cache, each model's FIFO queue and its limit, the rate limiter's counts.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

from ..api.routes import add_docs, add_routes
from ..api.service import ApiService

from ..serving.backends import OFFLINE_ID, describe
from ..serving.manager import ModelManager
from ..serving.result_cache import ResultCache
from ..serving.voices import VoiceLibrary
from ..types import EngineInfo
from ..web.access import SecurityHeaders
from ..web.origin import OriginGuard, SameOrigin
from .client import ClusterEngine, domain_error
from .config import ClusterConfig

log = logging.getLogger(__name__)

ROUTED_PATHS = ("/tts", "/v1/audio/speech")  # the bodies whose `model` picks a model
MODEL_HEADER = b"x-model"


class ModelRouting:
    """ASGI middleware: notes the model a synthesis request names (`scope["state"]["model"]`), body intact.

    Bodies over `max_bytes` are passed on unread (the upload limit refuses them next)."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        chosen = headers.get(MODEL_HEADER, b"").decode("latin-1").strip()
        length = headers.get(b"content-length", b"")
        if (not chosen and scope.get("method") == "POST" and scope.get("path") in ROUTED_PATHS
                and length.isdigit() and int(length) <= self.max_bytes
                and headers.get(b"content-type", b"").startswith(b"application/json")):
            body, receive = await _read_body(receive)
            try:
                value = json.loads(body or b"null")
                chosen = value.get("model", "") if isinstance(value, dict) else ""
            except ValueError:  # the route answers a malformed body itself
                chosen = ""
        if isinstance(chosen, str) and chosen.strip():
            scope.setdefault("state", {})["model"] = chosen.strip()
        await self.app(scope, receive, send)


async def _read_body(receive):
    """Read the whole request body, and a `receive` that hands it on again."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return b"", receive
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


class ReplicaBook:
    """What the replicas said about themselves with each job (replica id, model, process), for /health."""

    def __init__(self) -> None:
        self._seen: dict[str, dict] = {}
        self._lock = threading.Lock()

    def saw(self, meta: dict) -> None:
        with self._lock:
            entry = self._seen.setdefault(str(meta.get("replica")), {"models": [], "jobs": 0})
            if meta.get("model") not in entry["models"]:
                entry["models"].append(meta.get("model"))
            entry["jobs"] += 1
            entry["at"] = time.monotonic()

    def snapshot(self) -> dict:
        now = time.monotonic()
        with self._lock:
            return {rid: {"models": list(e["models"]), "jobs": e["jobs"], "last_job_s_ago": round(now - e["at"], 1)}
                    for rid, e in self._seen.items()}

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


class Describer:
    """A model's description: read here when this node has the folder, else asked of a replica; kept once read."""

    def __init__(self, config: ClusterConfig, workers: dict) -> None:
        self.config = config
        self.workers = workers
        self._known: dict[str, EngineInfo] = {}

    def __call__(self, model_id: str) -> EngineInfo:
        if model_id in self._known:
            return self._known[model_id]
        folder = Path(self.config.settings.models_dir) / model_id
        if model_id != OFFLINE_ID and folder.is_dir():
            info = describe(str(folder))
        else:
            try:
                worker = self.workers[self.config.pool_of(model_id).name]
                info = worker.describe.remote(model_id).result()
            except Exception as exc:  # noqa: BLE001 - Ray's wrapper → the replica's own error
                raise domain_error(exc) from None
        self._known[model_id] = info
        return info


def cluster_health(config: ClusterConfig, book: ReplicaBook) -> dict:
    """Each engine pool's replicas (by state, from Serve's controller) and the models the replicas served."""
    try:
        from ray import serve

        app_name = serve.get_replica_context().app_name
        deployments = serve.status().applications[app_name].deployments
    except Exception as exc:  # noqa: BLE001 - /health must answer even when the controller does not
        log.warning("serve status unavailable: %s", exc)
        deployments = {}
    pools = {}
    for pool in config.pools():
        status = deployments.get(pool.name)
        states = {str(k): int(v) for k, v in status.replica_states.items()} if status else {}
        scaling = config.autoscaling(pool)
        pools[pool.name] = {"status": str(getattr(status.status, "value", status.status)) if status else "unknown",
                            "models": list(pool.models), "running": states.get("RUNNING", 0), "states": states,
                            "max": pool.replicas, "min": scaling["min_replicas"], "gpus_each": pool.gpus,
                            "models_per_replica": config.held_models(pool),
                            "scale_to_zero_after_s": scaling.get("downscale_to_zero_delay_s")}
    running = sum(p["running"] for p in pools.values())
    if running == 0:
        book.clear()  # scaled to zero: nothing is loaded anywhere
    main = next(iter(pools.values()))
    return {"deployment": main["status"], "replicas": {"running": running, "max": sum(p["max"] for p in pools.values()),
                                                      "min": sum(p["min"] for p in pools.values())},
            "models": list(config.models), "pools": pools, "seen": book.snapshot()}


def build_ingress_app(workers: dict, config: ClusterConfig):
    """The FastAPI app the ingress replica serves (built on the replica, never pickled)."""
    from fastapi import FastAPI

    settings = config.settings.with_(host=config.host, port=config.port, engine_url=None)
    library = VoiceLibrary(settings.voices_dir, settings.max_voices)
    cache = ResultCache(settings.cache_entries)
    book = ReplicaBook()
    describer = Describer(config, workers)

    def loader(model_id: str, options, progress) -> ClusterEngine:
        worker = workers[config.pool_of(model_id).name]
        return ClusterEngine(worker, model_id, describer(model_id), library.ids, options.max_text_chars,
                             on_meta=book.saw)

    services: dict[str, ApiService] = {}
    for model_id in config.models:
        manager = ModelManager(model_id, loader=loader, idle_unload_s=0, concurrency=config.ingress_capacity(),
                               describe_model=describer, load_options=settings.load_options())
        services[model_id] = ApiService(manager, settings, library=library, cache=cache)
    for service in services.values():
        service.peer_models = tuple(config.models)
    primary = services[config.models[0]]

    def select(request) -> ApiService:
        chosen = getattr(request.state, "model", None)
        if not chosen:
            return primary
        if chosen in services:
            return services[chosen]
        for service in services.values():  # by the model's display name too
            info = service.manager.info()
            if info is not None and chosen == info.name:
                return service
        return primary  # an unknown name: the primary's check says which names exist

    app = FastAPI(title="CosyVoice Studio API (cluster)", docs_url=None, redoc_url=None)
    app.state.manager = primary.manager
    app.state.settings = settings
    app.state.surface = "cluster"  # the audit trail's name for every request the ingress serves
    add_routes(app, primary.manager, settings, service=primary)
    app.state.select_api = select
    app.state.other_apis = tuple(s for s in services.values() if s is not primary)
    app.state.cluster_health = lambda: cluster_health(config, book)
    add_docs(app)
    app.add_middleware(ModelRouting, max_bytes=int(settings.max_upload_mb * 2**20))
    app.add_middleware(OriginGuard, policy=SameOrigin.for_bind(config.host, settings.allowed_origins))
    app.add_middleware(SecurityHeaders, hsts=False)
    return app


def ingress_class():
    """The ingress deployment class (late-bound ASGI app: built on the replica from the config)."""
    from ray import serve

    @serve.ingress()
    class Ingress:
        def __init__(self, workers: dict, config_args: dict) -> None:
            self._workers = workers  # pool name → the engine deployment's handle
            self._config = ClusterConfig.from_args(config_args)

        def __serve_build_asgi_app__(self):
            return build_ingress_app(self._workers, self._config)

    return Ingress



