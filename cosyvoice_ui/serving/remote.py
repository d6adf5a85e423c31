"""Thin-client mode: an `Engine` whose synthesis runs on another instance of this app.

`app.py --engine-url http://gpu-box:7860 --api-key KEY` serves the UI (and the REST API) on a small
device and sends every request to the GPU box's `/tts`. Saved voices of the thin client travel as
prompt audio with each request (the remote caches their features by audio hash); voices saved on the
remote are usable by id. Nothing here imports torch.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

from .. import audio as audio_utils
from ..audio_read import MAX_RATE, MIN_RATE
from ..engine import Engine, raise_if_cancelled, report
from ..errors import CosyVoiceError, InvalidRequest
from ..redact import public_url, without_userinfo
from ..types import (Audio, AudioChunk, CheckedRequest, EngineInfo, Instruction, Mode, ProgressCallback,
                     SynthesisRequest)

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 600.0  # a long text on a busy remote can take minutes before the last byte
DESCRIBE_TIMEOUT_S = 3.0  # for the UI's first paint: a dead remote must not stall it
# How much audio a remote's answer may hold: far more than any voice takes to say the request's text (people
# speak a character in 0.05-0.3 s), so only a broken or hostile remote reaches it.
ANSWER_BASE_S = 60.0
ANSWER_S_PER_CHAR = 1.0
ERROR_BODY_BYTES = 1 << 20  # an error answer is a short JSON body


class RemoteError(CosyVoiceError):
    """The remote engine could not be reached or failed; the message names its URL and what to check."""

    def __init__(self, message: str, code: str = "remote_engine_error") -> None:
        super().__init__(message)
        self.code = code


class RemoteBusy(RemoteError):
    """The remote engine is up but cannot take the job now (its queue is full or it rate-limits us)."""


def _client(api_key: str | None, timeout: float | None = None):
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Timeout(READ_TIMEOUT_S if timeout is None else timeout, connect=CONNECT_TIMEOUT_S)
    return httpx.Client(headers=headers, timeout=limits)


def _fail(url: str, response, content: bytes | None = None) -> CosyVoiceError:
    """An error response of the remote (`content`: its body, when read here) → InvalidRequest (its 4xx about the
    request) or RemoteError."""
    try:
        error = (json.loads(content) if content is not None else response.json())["error"]
        code, message = str(error["code"]), str(error["message"])
    except Exception:  # not our JSON: a proxy page, a different server
        code, message = "remote_engine_error", f"HTTP {response.status_code}"
    url = public_url(url)  # a message never shows the user:password@ of --engine-url
    if response.status_code in (401, 403):
        return RemoteError(f"the engine at {url} refused the API key ({message}); start this app with the "
                           "remote's key: --api-key KEY", "remote_auth_failed")
    if response.status_code in (400, 404, 413, 422):
        return InvalidRequest(code, message)
    if response.status_code in (429, 503):
        return RemoteBusy(f"the engine at {url} is busy: {message}", code)
    return RemoteError(f"the engine at {url} failed: {message}")


def _request(client, method: str, url: str, **kwargs):
    import httpx

    try:
        response = client.request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        raise _unreachable(url, exc) from exc
    if response.status_code >= 400:
        raise _fail(url, response)
    return response


def _remote_marks(client, url: str) -> bool:
    """Whether the remote watermarks what it renders (its /health says so): the speech job here then does not
    mark the audio a second time. Unknown (an older server, no answer) counts as no."""
    try:
        health = client.get(f"{url}/health").json()
        return bool((health.get("watermark") or {}).get("marked")) if isinstance(health, dict) else False
    except Exception:  # noqa: BLE001  (only a missed saving: the audio is marked here instead)
        return False


def _unreachable(url: str, exc: Exception) -> RemoteError:
    return RemoteError(f"cannot reach the engine at {public_url(url)} ({type(exc).__name__}: "
                       f"{without_userinfo(str(exc))}); check that it is running "
                       "and that --engine-url is right", "engine_unreachable")


def info_from_models(payload: dict, url: str) -> EngineInfo:
    """EngineInfo from a `GET /v1/models` answer of another instance."""
    try:
        model = payload["data"][0]
        return EngineInfo(
            name=str(model["name"]), family=str(model["family"]), sample_rate=int(model["sample_rate"]),
            modes=tuple(Mode.parse(m) for m in model["modes"]), speakers=tuple(model.get("speakers", ())),
            device=f"remote {model.get('device', '?')}", streaming=bool(model.get("streaming", True)),
            instruct_examples=tuple(model.get("instruct_examples", ())), notes=str(model.get("notes", "")),
            backend=f"remote {public_url(url)}", **_remote_capabilities(model))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise RemoteError(f"{public_url(url)} did not answer /v1/models like a CosyVoice Studio instance ({exc}); check "
                          "--engine-url") from exc


def _remote_capabilities(model: dict) -> dict:
    """The family facts a remote `/v1/models` entry carries (instructions, tags, pronunciation hints, text
    caveats, what instruct speaks with), so the thin client's UI offers the same pickers and hints. An older
    instance without them gives empty ones."""
    instructions = tuple(Instruction(category=str(i["category"]), zh=str(i["label_zh"]), en=str(i["label_en"]),
                                     text=str(i["text"])) for i in model.get("instructions") or ())
    return dict(instructions=instructions, text_tags=tuple(map(str, model.get("text_tags") or ())),
                pronunciation=tuple(map(str, model.get("pronunciation") or ())),
                text_caveats=tuple(map(str, model.get("text_caveats") or ())),
                instruct_voice=model.get("instruct_needs") == "voice")


def describe_remote(url: str, api_key: str | None = None) -> EngineInfo:
    """What the remote model can do, with a short timeout (for the UI before anything is loaded)."""
    url = url.rstrip("/")
    with _client(api_key, DESCRIBE_TIMEOUT_S) as client:
        return info_from_models(_request(client, "GET", f"{url}/v1/models").json(), url)


class RemoteEngine(Engine):
    """Sends requests to another instance's REST API and yields its audio as it arrives.

    Not responsible for: the remote's queue or model (it has its own manager), loudness (the remote
    returns raw engine output, post-processing happens here as for a local engine).
    """

    retries_takes = True  # the remote server checks and re-renders its own takes: here they are only checked
    marks_output = False  # set from the remote's /health: its audio arrives watermarked (serving/jobs.py)

    def __init__(self, url: str, api_key: str | None = None, max_text_chars: int = 5000,
                 progress: ProgressCallback | None = None) -> None:
        self.url = url.rstrip("/")
        self.shown = public_url(self.url)  # what messages and logs name: no user:password@
        self.api_key = api_key
        self.max_text_chars = max_text_chars
        self._client = _client(api_key)
        self._voices: dict[str, tuple[Audio, str]] = {}
        self._lock = threading.Lock()
        report(progress, "load", 0.1, f"connecting to {self.shown}")
        try:
            payload = _request(self._client, "GET", f"{self.url}/v1/models").json()
            self._info = info_from_models(payload, self.url)
            self._remote_voices = tuple(payload["data"][0].get("saved_voices", ()))  # voices saved over there
            self.marks_output = _remote_marks(self._client, self.url)
        except BaseException:
            self._client.close()
            raise
        report(progress, "load", 1.0, f"remote model {self._info.name} at {self.shown}")
        log.info("thin client: %s on %s", self._info.name, self.shown)

    @property
    def info(self) -> EngineInfo:
        return self._info

    def check(self, request: SynthesisRequest) -> CheckedRequest:
        if request.mode in (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC) and request.prompt_audio is None:
            self._known_voices(request.speaker)  # a voice new to us may have been saved over there since
        return super().check(request)

    def usable_voices(self) -> tuple[str, ...]:
        return tuple(self._voices) + self._remote_voices

    def _synthesize(self, request: CheckedRequest, progress: ProgressCallback | None,
                    cancel: threading.Event | None) -> Iterator[AudioChunk]:
        import httpx

        body = self._body(request)
        report(progress, "frontend", 0.0, f"sending to {self.shown}")
        rate = self._info.sample_rate
        produced = 0
        limit_s = answer_seconds(request)
        try:
            with self._client.stream("POST", f"{self.url}/tts", json=body) as response:
                if response.status_code >= 400:
                    raise _fail(self.url, response, _read_capped(response, ERROR_BODY_BYTES, self.url))
                if not request.stream:
                    # base64 of 16-bit samples, plus the JSON around it
                    content = _read_capped(response, int(limit_s * self._answer_rate() * 2 * 4 / 3) + (1 << 20),
                                           self.url)
                    samples, rate = self._whole_answer(content, limit_s)
                    yield AudioChunk(samples, rate, 0, 1, True, request.text)
                    return
                rate = self._checked_rate(response.headers.get("x-sample-rate", rate))
                previous: np.ndarray | None = None
                carry = b""
                for data in response.iter_bytes():
                    raise_if_cancelled(cancel)
                    data, carry = _split_even(carry + data)
                    if not data:
                        continue
                    if previous is not None:
                        yield AudioChunk(previous, rate, 0, 1, False, request.text)
                    previous = _pcm_to_float(data)
                    produced += len(previous)
                    if produced > limit_s * rate:
                        raise self._too_much(limit_s)
                    report(progress, "vocoder", 0.5, f"{produced / rate:.1f} s received")
                if previous is not None:
                    yield AudioChunk(previous, rate, 0, 1, True, request.text)
        except httpx.HTTPError as exc:
            raise _unreachable(self.url, exc) from exc

    # --- bounding what the remote sends back ---------------------------------------------------------

    def _answer_rate(self) -> int:
        """The rate a whole answer's size is bounded at: the model's, or 48 kHz if more (its model may change)."""
        return max(int(self._info.sample_rate or 0), 48000)

    def _checked_rate(self, value) -> int:
        """The sample rate an answer states, refused when no model speaks at it."""
        try:
            rate = int(value)
        except (TypeError, ValueError):
            rate = 0
        if not MIN_RATE <= rate <= MAX_RATE:
            raise RemoteError(f"the engine at {self.shown} answered with audio at {str(value)[:20]!r} Hz, which is "
                              "not a sample rate; check that --engine-url points at a CosyVoice Studio instance")
        return rate

    def _whole_answer(self, content: bytes, limit_s: float) -> tuple[np.ndarray, int]:
        """A `/tts` JSON answer → (samples, rate), refused when it holds more than the request can make."""
        try:
            payload = json.loads(content)
            data = base64.b64decode(payload["audio"])
        except (ValueError, KeyError, TypeError) as exc:
            raise RemoteError(f"the engine at {self.shown} did not answer /tts like a CosyVoice Studio instance "
                              f"({type(exc).__name__}); check --engine-url") from None
        rate = self._checked_rate(payload.get("sample_rate"))
        if len(data) // 2 > limit_s * rate:
            raise self._too_much(limit_s)
        return _pcm_to_float(data), rate

    def _too_much(self, limit_s: float) -> RemoteError:
        return RemoteError(f"the engine at {self.shown} sent more than {limit_s:.0f} s of audio for this request, far "
                           "more than its text takes to say; stopped reading it (check --engine-url)")

    def register_voice(self, voice_id: str, audio: Audio, transcript: str, cache_dir: Path) -> None:
        """Keep the prompt here; it is sent with each request that uses the voice."""
        with self._lock:
            self._voices[voice_id] = (audio, transcript)
            self._info = replace(self._info, saved_voices=tuple(self._voices))

    def unregister_voice(self, voice_id: str) -> None:
        with self._lock:
            self._voices.pop(voice_id, None)
            self._info = replace(self._info, saved_voices=tuple(self._voices))

    def close(self) -> None:
        self._client.close()

    # --- internals --------------------------------------------------------------------------------------

    def _known_voices(self, speaker: str | None) -> tuple[str, ...]:
        remote = self._remote_voices
        if speaker and speaker not in self._voices and speaker not in remote:
            try:  # saved on the remote since we connected?
                listing = _request(self._client, "GET", f"{self.url}/v1/voices").json()
                remote = tuple(v["id"] for v in listing.get("data", ()))
                self._remote_voices = remote
            except (CosyVoiceError, KeyError, TypeError, ValueError):
                log.debug("could not refresh the remote's voices", exc_info=True)
        return tuple(self._voices) + remote

    def _body(self, request: SynthesisRequest) -> dict:
        """The remote `/tts` body: raw 16-bit PCM, no loudness change (done here like for a local engine)."""
        body = {"mode": request.mode.value, "text": request.text, "prompt_text": request.prompt_text,
                "instruct_text": request.instruct_text, "speed": request.speed, "seed": request.seed,
                "stream": request.stream, "format": "pcm", "normalize": False,
                "text_frontend": request.text_frontend}
        prompt = request.prompt_audio
        speaker = request.speaker
        if speaker and speaker in self._voices and prompt is None:
            prompt, transcript = self._voices[speaker]
            if request.mode is Mode.ZERO_SHOT and not request.prompt_text.strip():
                body["prompt_text"] = transcript
            speaker = None
        if request.mode in (Mode.SFT, Mode.INSTRUCT):
            body["speaker"] = speaker
        elif speaker:
            body["voice_id"] = speaker
        if prompt is not None:
            body["prompt_audio"] = _audio_b64(prompt)
            # This process's own speech job already applied the consent rule to its caller (a saved voice was
            # consented when saved), so the remote, which sees every voice as a recording, is told so.
            body["consent"] = True
        if request.source_audio is not None:
            body["source_audio"] = _audio_b64(request.source_audio)
        return body


def _audio_b64(audio: Audio) -> str:
    """float32 WAV, so the remote sees exactly the samples we have."""
    import io

    import soundfile as sf

    buffer = io.BytesIO()
    sf.write(buffer, audio_utils.to_mono_float(audio.samples), audio.sample_rate, format="WAV", subtype="FLOAT")
    return base64.b64encode(buffer.getvalue()).decode()


def answer_seconds(request: SynthesisRequest) -> float:
    """The most audio a remote may send for `request`: generous for its text (or, converting, its source
    recording) at its speed."""
    source = request.source_audio.duration if request.source_audio is not None else 0.0
    speed = request.speed if request.speed and request.speed > 0 else 1.0
    return (ANSWER_BASE_S + ANSWER_S_PER_CHAR * len(request.text) + 2 * source) / min(speed, 1.0)


def _read_capped(response, limit: int, url: str) -> bytes:
    """The body of a streamed response, refused (unread past it) when longer than `limit` bytes."""
    parts, size = [], 0
    for data in response.iter_bytes():
        size += len(data)
        if size > limit:
            raise RemoteError(f"the engine at {public_url(url)} sent a larger answer than this request can make (over "
                              f"{limit / 2**20:.1f} MB); stopped reading it (check --engine-url)")
        parts.append(data)
    return b"".join(parts)


def _pcm_to_float(data: bytes) -> np.ndarray:
    # The inverse of `audio.encode(..., "pcm")`, which scales by 32767.
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32767.0


def _split_even(data: bytes) -> tuple[bytes, bytes]:
    """16-bit samples may be split across network reads: keep an odd trailing byte for the next one."""
    cut = len(data) - (len(data) % 2)
    return data[:cut], data[cut:]
