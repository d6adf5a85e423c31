"""The engine deployment: each Serve replica runs our engine unchanged, one `ModelManager` per model it holds.

Models are routed by id with Serve's model multiplexing (`serve.get_multiplexed_model_id()`): a request for a
model this replica holds runs at once; another is loaded, and beyond `models_per_replica` the least recently used
one is released (its running jobs finish first). Saved voices come from the shared voices folder: a voice saved
through any ingress is registered here on first use, its features read from (or written to) that folder.

Each synthesis streams `("meta" | "progress" | "chunk", payload)` items; a cancelled stream (the client went away)
sets the engine's cancel flag, so it stops at its next step instead of finishing for nobody.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from pathlib import Path

from ..audio import audio_hash
from ..engine import Engine
from ..serving.backends import OFFLINE_ID, describe, load_any
from ..serving.manager import ModelManager
from ..serving.voice_service import register_all
from ..serving.voices import VoiceLibrary
from ..types import CheckedRequest, EngineInfo
from .config import WORKER_NAME, ClusterConfig

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 0.25  # progress events a replica forwards within one stage


def model_path(config: ClusterConfig, model_id: str, served: tuple[str, ...]) -> str:
    """The id a replica loads: the offline voice's id, or the model's folder under models_dir."""
    if model_id not in served:
        from ..errors import InvalidRequest

        raise InvalidRequest("model_not_found", f"these replicas do not serve {model_id!r}; they serve "
                             f"{', '.join(served)}", param="model")
    if model_id == OFFLINE_ID:
        return OFFLINE_ID
    return str(Path(config.settings.models_dir) / model_id)


class SharedVoices:
    """Registers saved voices from the shared folder with an engine, once per voice content.

    A voice is keyed by the content hash of its stored recording, so a voice deleted and saved again under the
    same id (on any replica) is registered again here instead of speaking with the old features.
    """

    def __init__(self, library: VoiceLibrary) -> None:
        self.library = library
        self._registered: dict[int, dict[str, str]] = {}  # id(engine) → voice id → content hash
        self._lock = threading.Lock()

    def register_all(self, engine: Engine) -> None:
        register_all(engine, self.library)
        with self._lock:
            self._registered[id(engine)] = {v: self._hash(v) for v in engine.info.saved_voices
                                            if self.library.get(v) is not None}

    def ensure(self, engine: Engine, voice_id: str | None) -> bool:
        """Make `voice_id` usable if it is a saved voice; True when it was (re)registered now."""
        if not voice_id or self.library.get(voice_id) is None:
            return False
        digest = self._hash(voice_id)
        with self._lock:
            known = self._registered.setdefault(id(engine), {})
            if known.get(voice_id) == digest and voice_id in engine.info.saved_voices:
                return False
        voice = self.library.require(voice_id)
        engine.register_voice(voice.id, self.library.audio(voice.id), voice.transcript, self.library.path(voice.id))
        with self._lock:
            self._registered.setdefault(id(engine), {})[voice_id] = digest
        return True

    def forget(self, engine: Engine) -> None:
        with self._lock:
            self._registered.pop(id(engine), None)

    def _hash(self, voice_id: str) -> str:
        return audio_hash(self.library.audio(voice_id))


class HeldModel:
    """One model in one replica. Serve calls `__del__` when it evicts the model (LRU)."""

    def __init__(self, model_id: str, manager: ModelManager, on_release) -> None:
        self.model_id = model_id
        self.manager = manager
        self._on_release = on_release
        self._released = False

    def __del__(self) -> None:  # Serve's multiplexer calls this on eviction; the collector may call it again
        if getattr(self, "_released", True):
            return
        self._released = True
        self.manager.shutdown(wait_s=60.0)  # running jobs on it finish first
        self._on_release(self)


class WorkerBase:
    """The replica's state and methods; `worker_class` adds the multiplexed model getter."""

    def __init__(self, config_args: dict, pool_name: str = WORKER_NAME) -> None:
        from ..serving.memory import set_compute_threads

        self.config = ClusterConfig.from_args(config_args)
        self.pool = self.config.pool(pool_name)
        settings = self.config.settings
        set_compute_threads(settings.threads)
        self.voices = SharedVoices(VoiceLibrary(settings.voices_dir))
        self.held: dict[str, HeldModel] = {}
        self.loads = 0
        self.served = 0
        self.cancelled = 0
        self.failed = 0
        self.running = 0
        self._lock = threading.Lock()

    # --- models -------------------------------------------------------------------------------------------

    async def _load(self, model_id: str) -> HeldModel:
        settings = self.config.settings
        target = model_path(self.config, model_id, self.pool.models)

        def loader(mid, options, progress) -> Engine:
            with self._lock:
                self.loads += 1
            log.info("replica %s loads %s (load %d)", self.replica_id(), model_id, self.loads)
            return load_any(mid, options, progress)

        manager = ModelManager(target, loader=loader, idle_unload_s=settings.idle_unload_s,
                               concurrency=settings.concurrency, on_load=self.voices.register_all,
                               load_options=settings.load_options())
        held = HeldModel(model_id, manager, self._released)
        try:
            await asyncio.to_thread(manager.engine)  # loaded here: a reload is counted and never blocks the loop
        except BaseException:
            manager.shutdown(wait_s=0.0)  # its idle watcher too
            held._released = True
            raise
        self.held[model_id] = held
        return held

    def _released(self, held: HeldModel) -> None:
        if self.held.get(held.model_id) is held:  # not a newer load of the same model
            del self.held[held.model_id]
        log.info("replica %s released %s", self.replica_id(), held.model_id)

    async def _current(self) -> HeldModel:
        from ray import serve

        model_id = serve.get_multiplexed_model_id() or self.pool.models[0]
        return await self.model(model_id)  # the multiplexed getter `worker_class` adds

    # --- what the ingress calls ---------------------------------------------------------------------------

    def describe(self, model_id: str) -> EngineInfo:
        """A model's description without loading it (for an ingress that has no copy of the folder)."""
        return describe(model_path(self.config, model_id, self.pool.models))

    async def prepare_voice(self, voice_id: str) -> bool:
        """Register a just-saved voice now: its features are computed once and written to the shared folder."""
        held = await self._current()

        def register() -> bool:
            with held.manager.job() as engine:
                return self.voices.ensure(engine, voice_id)

        return await asyncio.to_thread(register)

    async def synthesize(self, request: CheckedRequest):
        """Stream one request's `(kind, payload)` items: meta first, then progress events and audio chunks."""
        held = await self._current()
        loop = asyncio.get_running_loop()
        items: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()

        def put(kind: str, payload=None) -> None:
            loop.call_soon_threadsafe(items.put_nowait, (kind, payload))

        last = {"stage": None, "at": 0.0}

        def progress(event) -> None:  # a new stage, else at most a few a second: each one crosses the network
            now = time.monotonic()
            if event.stage != last["stage"] or now - last["at"] >= PROGRESS_EVERY_S:
                last.update(stage=event.stage, at=now)
                put("progress", event)

        def produce() -> None:
            try:
                with held.manager.job(cancel=cancel) as engine:
                    if request.prompt_audio is None:
                        self.voices.ensure(engine, request.speaker)
                    for chunk in engine.synthesize(request, progress=progress, cancel=cancel):
                        put("chunk", chunk)
                put("end")
            except BaseException as exc:  # noqa: BLE001 - delivered to the caller as it is
                put("error", exc)

        with self._lock:
            self.running += 1
        worker = loop.run_in_executor(None, produce)
        outcome = "cancelled"  # until the engine's own end or error arrives
        try:
            yield "meta", {"replica": self.replica_id(), "model": held.model_id, "pid": os.getpid()}
            while True:
                kind, payload = await items.get()
                if kind == "end":
                    outcome = "served"
                    break
                if kind == "error":
                    outcome = "failed"
                    raise payload
                yield kind, payload
        finally:
            with self._lock:
                self.running -= 1
                setattr(self, outcome, getattr(self, outcome) + 1)
            if outcome == "cancelled":  # the caller went away: the engine stops at its next step
                cancel.set()
                log.info("replica %s: the caller went away; the job is cancelled", self.replica_id())
        await worker

    def stats(self) -> dict:
        """This replica: its id and process, models held, loads so far, jobs served, cancelled, running."""
        voices = {}
        for model_id, held in list(self.held.items()):
            engine = held.manager.loaded
            voices[model_id] = list(engine.info.saved_voices) if engine is not None else []
        return {"replica": self.replica_id(), "pool": self.pool.name, "pid": os.getpid(), "models": sorted(self.held),
                "loaded": sorted(m for m, h in self.held.items() if h.manager.loaded is not None),
                "loads": self.loads, "served": self.served, "cancelled": self.cancelled, "running": self.running,
                "voices": voices}

    @staticmethod
    def replica_id() -> str:
        try:
            from ray import serve

            return serve.get_replica_context().replica_id.unique_id
        except Exception:  # outside a replica (unit tests of the class)
            return f"local-{os.getpid()}"


def worker_class(models_per_replica: int):
    """The deployment class, with Serve's multiplexed getter sized for `models_per_replica`."""
    from ray import serve

    class EngineWorker(WorkerBase):
        @serve.multiplexed(max_num_models_per_replica=max(1, models_per_replica))
        async def model(self, model_id: str) -> HeldModel:
            return await self._load(model_id)

    return EngineWorker
