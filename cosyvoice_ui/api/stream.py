"""Streaming response bodies: audio that leaves while the engine is still producing it.

A running job (`serving/jobs.Live`) holds its slot in the manager's queue until the last chunk is sent, or
until the client goes away (then the engine is cancelled and the slot freed). Bodies come as chunked WAV (a header with
unknown sizes, as streaming servers send), raw 16-bit PCM, or OpenAI-style server-sent events.
"""

from __future__ import annotations

import base64
import json
import logging
import struct
from collections.abc import AsyncIterator, Callable, Iterator

import numpy as np

from .. import audio as audio_utils
from ..serving.jobs import Live

log = logging.getLogger(__name__)

STREAM_FORMATS = ("wav", "pcm")
_UNKNOWN_SIZE = 0xFFFFFFFF  # "until the end of the stream": what readers accept for a WAV of unknown length


def wav_stream_header(sample_rate: int) -> bytes:
    """A 44-byte header of a mono 16-bit PCM WAV whose length is not known yet."""
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
    return b"RIFF" + struct.pack("<I", _UNKNOWN_SIZE) + b"WAVEfmt " + fmt + b"data" + struct.pack("<I", _UNKNOWN_SIZE)


def audio_body(pieces: Iterator[np.ndarray], fmt: str, sample_rate: int, gain: float | None,
               on_done: Callable[[np.ndarray], None] | None = None) -> Iterator[bytes]:
    """Chunked wav/pcm bytes. `gain` None: measure it on the first chunk; `on_done(all)` after the last."""
    if fmt == "wav":
        yield wav_stream_header(sample_rate)
    kept: list[np.ndarray] = []
    for samples in pieces:
        if gain is None:
            gain = audio_utils.stream_gain(samples, sample_rate)
        out = np.clip(samples * gain, -1.0, 1.0).astype(np.float32)
        kept.append(out)
        yield audio_utils.encode(out, sample_rate, "pcm")
    if on_done is not None:
        on_done(np.concatenate(kept) if kept else np.zeros(0, np.float32))


def sse_event(payload: dict) -> bytes:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


def sse_body(audio: Iterator[bytes], chars: int) -> Iterator[bytes]:
    """OpenAI's speech SSE: `speech.audio.delta` events (base64 audio), then `speech.audio.done`.

    `usage` counts input characters (there are no text tokens to report here).
    """
    try:
        for piece in audio:
            yield sse_event({"type": "speech.audio.delta", "audio": base64.b64encode(piece).decode()})
    except Exception as exc:  # the status line is gone already; tell the client in-band
        code = getattr(exc, "code", "synthesis_failed")
        log.warning("stream failed: %s", exc)
        yield sse_event({"type": "error", "error": {"code": code, "message": str(exc)}})
        return
    yield sse_event({"type": "speech.audio.done", "usage": {"input_tokens": chars, "output_tokens": 0,
                                                            "total_tokens": chars}})


async def guarded(body: Iterator[bytes], job: Live | None) -> AsyncIterator[bytes]:
    """Run a sync body in the threadpool; when the client disconnects, cancel the engine and free the slot."""
    from starlette.concurrency import iterate_in_threadpool

    try:
        async for piece in iterate_in_threadpool(body):
            yield piece
    finally:
        if job is not None:
            if not job.complete:
                job.cancel.set()
            try:
                body.close()  # runs the body's finally blocks → Live.chunks → release
            except ValueError:  # still executing in a worker: it ends at the cancel flag and releases
                return
            job.release()  # a body that never started has no finally to run
