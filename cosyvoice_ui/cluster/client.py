"""The ingress's `Engine`: each request goes to an engine replica through a Serve streaming handle.

The ingress's own `ModelManager` holds one of these per model (it loads nothing: "loading" is describing the
model). Chunks and progress events arrive as the replica makes them. A replica that dies before it sent any
audio is retried once on another; one that dies mid-stream is reported as a clean, retryable 503 (audio
already sent cannot be taken back). Closing the stream (the client went away) cancels the replica's job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from ..engine import Engine, raise_if_cancelled, report
from ..errors import CosyVoiceError
from ..serving.remote import RemoteBusy
from ..types import Audio, AudioChunk, CheckedRequest, EngineInfo, ProgressCallback

log = logging.getLogger(__name__)

REPLICA_RETRY_AFTER_S = 2


class ReplicaLost(RemoteBusy):
    """The replica running the job stopped (killed, out of memory, node lost); retry: another one serves."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="replica_lost")
        self.retry_after_s = REPLICA_RETRY_AFTER_S


def _lost(exc: BaseException) -> bool:
    """Whether a handle error means the replica went away (as opposed to the engine refusing the request)."""
    from ray import exceptions as ray_errors
    from ray.serve import exceptions as serve_errors

    lost = (ray_errors.ActorDiedError, ray_errors.ActorUnavailableError, ray_errors.RayActorError,
            ray_errors.WorkerCrashedError, ray_errors.NodeDiedError, serve_errors.ReplicaUnavailableError,
            serve_errors.DeploymentUnavailableError)
    return isinstance(exc, lost)


def domain_error(exc: BaseException) -> BaseException:
    """The replica's own error (InvalidRequest, Cancelled, ...) out of Ray's wrapper, else a clean message."""
    from ray.exceptions import RayTaskError

    if isinstance(exc, RayTaskError):
        cause = exc.cause if isinstance(exc.cause, BaseException) else None
        if isinstance(cause, CosyVoiceError):
            return cause
        if cause is not None and _lost(cause):
            return ReplicaLost("the engine replica running this job stopped; retry: another replica serves it")
        name = type(cause).__name__ if cause is not None else "error"
        return CosyVoiceError(f"the engine replica failed ({name}); see the replica's log")
    if _lost(exc):
        return ReplicaLost("the engine replica running this job stopped; retry: another replica serves it")
    return exc


class ClusterEngine(Engine):
    """A model served by the cluster's engine replicas, seen from the ingress.

    Not responsible for: loading (replicas do, per model id), the voices' features (replicas compute them into
    the shared voices folder), loudness and formats (the ingress's service, as for any engine).
    """

    def __init__(self, handle, model_id: str, info: EngineInfo, library_ids: Callable[[], tuple[str, ...]],
                 max_text_chars: int = 5000, on_meta: Callable[[dict], None] | None = None) -> None:
        self.handle = handle
        self.model_id = model_id
        self.max_text_chars = max_text_chars
        self._library_ids = library_ids
        self._on_meta = on_meta
        self._prompts: dict[str, tuple[Audio, str]] = {}  # voices not in the shared folder (the built-in one)
        self._info = replace(info, device=f"cluster ({info.device})", backend=f"ray serve: {info.backend}")
        self._lock = threading.Lock()

    @property
    def info(self) -> EngineInfo:
        return self._info

    def usable_voices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self._library_ids() + tuple(self._prompts)))

    def register_voice(self, voice_id: str, audio: Audio, transcript: str, cache_dir: Path) -> None:
        """A shared saved voice: a replica computes its features into the shared folder now (once); any other
        voice (the built-in one) travels with each request as its prompt."""
        if voice_id in self._library_ids():
            response = self._handle().prepare_voice.remote(voice_id)
            try:
                response.result()
            except Exception as exc:  # noqa: BLE001 - mapped to the replica's own error
                raise domain_error(exc) from None
        else:
            self._prompts[voice_id] = (audio, transcript)
        with self._lock:
            self._info = replace(self._info, saved_voices=tuple(dict.fromkeys(self._info.saved_voices + (voice_id,))))

    def unregister_voice(self, voice_id: str) -> None:
        with self._lock:
            self._prompts.pop(voice_id, None)
            self._info = replace(self._info, saved_voices=tuple(v for v in self._info.saved_voices if v != voice_id))

    def _handle(self, stream: bool = False):
        return self.handle.options(multiplexed_model_id=self.model_id, stream=stream)

    def _synthesize(self, request: CheckedRequest, progress: ProgressCallback | None,
                    cancel: threading.Event | None) -> Iterator[AudioChunk]:
        request = self._with_prompt(request)
        report(progress, "frontend", 0.0, "sent to the cluster")
        for attempt in (1, 2):
            sent = False
            stream = self._handle(stream=True).synthesize.remote(request)
            try:
                for kind, payload in stream:
                    if cancel is not None and cancel.is_set():
                        stream.cancel()
                        raise_if_cancelled(cancel)
                    if kind == "meta":
                        if self._on_meta is not None:
                            self._on_meta(payload)
                    elif kind == "progress":
                        if progress is not None:
                            progress(payload)
                    else:
                        sent = True
                        yield payload
                return
            except GeneratorExit:
                stream.cancel()  # the consumer stopped: the replica cancels the engine job
                raise
            except Exception as exc:  # noqa: BLE001 - Ray's errors, mapped below
                error = domain_error(exc)
                if isinstance(error, ReplicaLost) and not sent and attempt == 1:
                    log.warning("a replica stopped before any audio; retrying once on another replica")
                    time.sleep(0.2)
                    continue
                raise error from None

    def _with_prompt(self, request: CheckedRequest) -> CheckedRequest:
        """A voice the replicas cannot read from the shared folder goes along as the prompt recording."""
        speaker = request.speaker
        if speaker and request.prompt_audio is None and speaker in self._prompts:
            audio, transcript = self._prompts[speaker]
            return replace(request, prompt_audio=audio, prompt_text=request.prompt_text or transcript, speaker=None)
        return request
