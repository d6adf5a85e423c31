"""Reading a recording without trusting its file: the one decoder behind every door that takes audio.

A recording's size on disk says little about its size decoded: a 100 KB FLAC can hold an hour of 8-channel
silence, gigabytes as float32. So the header (frames, channels, rate) is checked against the door's
`AudioLimits` before any sample is decoded; decoding then runs in blocks, each mixed down to mono as it
arrives, under a running cap (a stream may not say how long it is, or say less than it holds). Peak memory is
the mono result plus one block, never channels × length. `audio.read_audio` is the public entry, with the
limits of each door.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import InvalidRequest

log = logging.getLogger(__name__)

MAX_CHANNELS = 8  # 7.1 surround; more is not a voice recording
MIN_RATE = 1000
MAX_RATE = 192000
BLOCK_FRAMES = 1 << 16  # frames decoded at once: 2 MB of float32 at 8 channels
UNKNOWN_LENGTH = 2**63 - 1  # libsndfile's SF_COUNT_MAX: the stream does not say how long it is
MAX_SAMPLES = 14_400_000  # mono samples a door keeps unless it says otherwise (10 min at 24 kHz): 58 MB of float32


@dataclass(frozen=True)
class AudioLimits:
    """What one door reads of a recording.

    `max_seconds` is the raw length decoded at most (a prompt is trimmed of silence later, so its door reads a
    few times what it accepts); a longer recording is refused with `code`, the message saying `advice`, and
    `allowed_seconds` (what the door accepts in the end) as its `max_seconds` parameter. `max_samples` bounds
    the mono result (memory), `max_decoded` the samples of all channels together (decoding work).
    """

    max_seconds: float
    allowed_seconds: float
    code: str
    advice: str
    max_samples: int = MAX_SAMPLES
    max_decoded: int = 2 * MAX_SAMPLES
    max_channels: int = MAX_CHANNELS
    min_rate: int = MIN_RATE
    max_rate: int = MAX_RATE

    def frames_cap(self, rate: int, channels: int) -> int:
        """The most frames decoded at `rate` with `channels`: the first of the limits a longer file passes."""
        return int(min(self.max_seconds * rate, self.max_samples, self.max_decoded // max(1, channels)))


def decode(source: str | Path | bytes, what: str, limits: AudioLimits) -> tuple[np.ndarray, int]:
    """A file path or file bytes (wav, flac, mp3, ogg, ...) → (mono float32 samples, rate), within `limits`."""
    import soundfile as sf

    try:
        sound = sf.SoundFile(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else str(source))
    except Exception as exc:  # soundfile raises LibsndfileError, RuntimeError, TypeError...
        raise _unreadable(source, what, exc) from None
    with sound:
        frames = sound.frames if 0 <= sound.frames < UNKNOWN_LENGTH else None
        rate = int(sound.samplerate)
        check_header(frames, sound.channels, rate, what, limits)
        try:
            samples = read_blocks(sound, frames, what, limits)
        except InvalidRequest:
            raise
        except Exception as exc:  # a damaged stream fails part-way
            raise _unreadable(source, what, exc) from None
    if not len(samples):
        raise InvalidRequest("audio_unreadable", f"the {what} holds no sound (the file has no audio samples); "
                             "upload a WAV, FLAC, MP3 or OGG file with the recording", what=what)
    return samples, rate


def check_header(frames: int | None, channels: int, rate: int, what: str, limits: AudioLimits) -> None:
    """Refuse, before decoding, what the header says is past `limits` (`frames` None: the stream did not say)."""
    if channels > limits.max_channels:
        raise InvalidRequest("audio_too_many_channels", f"the {what} has {channels} channels; at most "
                             f"{limits.max_channels} can be read, so export it as mono or stereo", what=what,
                             channels=channels, max_channels=limits.max_channels)
    if not limits.min_rate <= rate <= limits.max_rate:
        raise InvalidRequest("audio_rate_unsupported", f"the {what} is sampled at {rate} Hz; recordings at "
                             f"{limits.min_rate}-{limits.max_rate} Hz can be read, so export it at 16, 24 or "
                             "48 kHz", what=what, rate=rate, min_rate=limits.min_rate, max_rate=limits.max_rate)
    if frames is not None:
        check_length(frames, channels, rate, what, limits)


def check_length(frames: int, channels: int, rate: int, what: str, limits: AudioLimits, more: bool = False) -> None:
    """Refuse `frames` past `limits` (`more`: the decoder has reached it and the stream goes on)."""
    seconds = frames / rate
    over = "more than " if more else ""
    if seconds > limits.max_seconds:
        raise InvalidRequest(limits.code, f"the {what} is {over}{seconds:.1f} s long; {limits.advice}", what=what,
                             seconds=round(seconds, 1), max_seconds=limits.allowed_seconds)
    fits = limits.frames_cap(rate, channels)
    if frames > fits:
        raise InvalidRequest("audio_too_large", f"the {what} is too large to read: {over}{seconds:.1f} s of "
                             f"{channels}-channel audio at {rate} Hz, of which at most {fits / rate:.1f} s can be "
                             "read here; export it as mono at 16 or 24 kHz, or trim it", what=what,
                             seconds=round(seconds, 1), channels=channels, rate=rate,
                             max_seconds=round(fits / rate, 1))


def read_blocks(sound, frames: int | None, what: str, limits: AudioLimits) -> np.ndarray:
    """Decode an open `soundfile.SoundFile` block by block into mono float32, refusing it as soon as the decoded
    length passes the door's cap (the header may be missing or wrong)."""
    channels, rate = sound.channels, int(sound.samplerate)
    cap = limits.frames_cap(rate, channels)
    # np.empty only reserves: pages of a buffer the stream never fills are not resident.
    out = np.empty(cap if frames is None else min(frames, cap), np.float32)
    block = np.empty((BLOCK_FRAMES, channels), np.float32)
    done = 0
    while True:
        got = sound.read(dtype="float32", always_2d=True, out=block)
        if not len(got):
            break
        end = done + len(got)
        if end > cap:
            check_length(end, channels, rate, what, limits, more=True)  # raises: `end` is past a limit of `cap`
        if end > len(out):  # more than the header said, still under the cap
            grown = np.empty(cap, np.float32)
            grown[:done] = out[:done]
            out = grown
        np.mean(got, axis=1, out=out[done:end])
        done = end
    return out if done == len(out) else out[:done]


def _unreadable(source: str | Path | bytes, what: str, exc: BaseException) -> InvalidRequest:
    # soundfile's message names the file or a buffer object; the user only needs to know it isn't audio
    log.info("unreadable %s: %s", what, exc)
    return InvalidRequest("audio_unreadable", f"the {what} could not be read as audio ({_why_unreadable(source)}); "
                          "upload a WAV, FLAC, MP3 or OGG file", what=what)


def _why_unreadable(source: str | Path | bytes) -> str:
    """Why a recording would not decode, in words that name no folder (the file's own name at most)."""
    if isinstance(source, (bytes, bytearray)):
        return "the file is empty" if not source else "not a sound file, or damaged"
    path = Path(source)
    try:
        if path.is_dir():
            return f"{path.name!r} is a folder, not an audio file"
        if not path.exists():
            return f"there is no file {path.name!r}"
        return "the file is empty" if path.stat().st_size == 0 else "not a sound file, or damaged"
    except OSError:  # a name the file system refuses (too long, ...)
        return "not a sound file, or damaged"
