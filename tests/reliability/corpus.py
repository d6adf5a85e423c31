"""The bad-input corpus: every hostile or odd input the app gets, generated here (no audio files in git), with
what each surface must answer. The REST, UI and CLI tests (`test_bad_input_*.py`) run the same cases.

A case's `expect` is the refusal every surface gives (its error code and words its message must hold), or
None when the input is odd but usable (stereo, 32-bit float, clipping, DC offset, emoji...): then it is served.
`check_clean` is the rule for every message a user reads: no traceback, object repr or filesystem path.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import soundfile as sf

from cosyvoice_ui.testing.signals import voice_clip

TRANSCRIPT = "希望你以后能够做的比我还好呦。"
SPEAKER = "英文女"  # a preset of the tiny SFT model
VALID_TEXT = "Hi there."
UPLOAD_CAP_MB = 20  # the app's default --max-upload-mb, which the REST app of these tests keeps

# --- what a clean message is ------------------------------------------------------------------------------

LEAKS = (
    (re.compile(r"Traceback|File \""), "a traceback"),
    (re.compile(r"<[\w.]+ object at 0x"), "an object repr"),
    (re.compile(r"/work|/home|/tmp|/private/var|[A-Za-z]:\\[\w.]|\.py\""), "a filesystem path"),
    (re.compile(r"pytest-of-|site-packages"), "a filesystem path"),
)


def check_clean(message: str, *extra_paths: str) -> None:
    """Fail when a user-facing message shows a traceback, an object repr or a path (also any of `extra_paths`)."""
    assert isinstance(message, str) and message.strip(), f"no message: {message!r}"
    for pattern, what in LEAKS:
        assert not pattern.search(message), f"the message shows {what}: {message!r}"
    for path in extra_paths:
        assert path not in message, f"the message shows the path {path}: {message!r}"


@dataclass(frozen=True)
class Refusal:
    """A specific refusal: the error code, and words its message holds (matched without case)."""

    code: str
    words: tuple[str, ...]
    status: int = 422

    def check(self, code: str, message: str, *extra_paths: str) -> None:
        assert code == self.code, f"code {code!r}, expected {self.code!r}: {message}"
        missing = [w for w in self.words if w.lower() not in message.lower()]
        assert not missing, f"the message does not say {missing}: {message!r}"
        check_clean(message, *extra_paths)


# --- audio ------------------------------------------------------------------------------------------------


def wav_bytes(samples: np.ndarray, rate: int = 16000, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def voice(seconds: float = 4.0, rate: int = 16000) -> np.ndarray:
    return voice_clip(seconds, rate).samples


@functools.cache
def ten_minutes_flac() -> bytes:
    """10 minutes of voice as FLAC (11 MB: under the upload cap, so the duration check is what refuses it);
    a 4 s clip tiled, since synthesising 10 minutes of signal is slow."""
    return wav_bytes(np.tile(voice(4.0), 150), fmt="FLAC")


def _with(samples: np.ndarray, index: int, value: float) -> np.ndarray:
    broken = samples.astype(np.float32).copy()
    broken[index::997] = value
    return broken


def _over_cap() -> bytes:
    """A WAV header followed by more bytes than the upload cap allows (never decoded: the cap refuses first)."""
    size = (UPLOAD_CAP_MB + 1) * 2**20
    return wav_bytes(np.zeros(0, np.float32))[:40] + size.to_bytes(4, "little") + bytes(size)


UNREADABLE = ("could not be read", "wav")

# --- decompression bombs: tiny files that decode to a lot (test_hostile_audio.py measures what refusing costs) ---


def silence_file(fmt: str, rate: int, channels: int, seconds: float, subtype: str | None = None) -> bytes:
    """`seconds` of digital silence written block by block (compressed, it is next to nothing)."""
    buffer = io.BytesIO()
    with sf.SoundFile(buffer, "w", rate, channels, format=fmt, subtype=subtype) as sound:
        block = np.zeros((1 << 16, channels), np.float32)
        left = int(seconds * rate)
        while left > 0:
            sound.write(block[: min(left, len(block))])
            left -= len(block)
    return buffer.getvalue()


@functools.cache
def eight_channel_bomb() -> bytes:
    """6.5 minutes of 8-channel 48 kHz silence: 150 KB of FLAC, 600 MB as float32."""
    return silence_file("FLAC", 48000, 8, 390)


@functools.cache
def hour_of_flac() -> bytes:
    """An hour of 16 kHz mono silence: 180 KB of FLAC, 230 MB as float32."""
    return silence_file("FLAC", 16000, 1, 3600)


def _flac_total_samples(data: bytes, total: int) -> bytes:
    """`data` (a FLAC file) with its STREAMINFO's 36-bit total-samples field set to `total` (0: unknown)."""
    patched = bytearray(data)
    assert patched[:4] == b"fLaC" and patched[4] & 0x7F == 0  # STREAMINFO is the first block
    fields = int.from_bytes(patched[18:26], "big")  # rate (20 bits), channels, bits, total samples (36 bits)
    patched[18:26] = ((fields >> 36 << 36) | total).to_bytes(8, "big")
    return bytes(patched)


@functools.cache
def flac_without_length() -> bytes:
    """An hour of silence whose header says "length unknown" (what a FLAC encoder writing to a pipe leaves).
    libsndfile decodes such a stream until the end, where soundfile's seek fails: a short one is unreadable."""
    return _flac_total_samples(hour_of_flac(), 0)


def wav_claiming_more() -> bytes:
    """4 s of voice whose WAV header claims 2 GB of samples (libsndfile believes the file's real size)."""
    patched = bytearray(wav_bytes(voice()))
    assert patched[36:40] == b"data"
    patched[4:8] = (0x7FFFFF24).to_bytes(4, "little")
    patched[40:44] = (0x7FFFFF00).to_bytes(4, "little")
    return bytes(patched)


@functools.cache
def vorbis_bomb() -> bytes:
    """10 minutes of 16 kHz silence as OGG/Vorbis: 43 KB."""
    return silence_file("OGG", 16000, 1, 600, "VORBIS")


@functools.cache
def mp3_bomb() -> bytes:
    """200 s of 16 kHz silence as MP3: 200 KB."""
    return silence_file("MP3", 16000, 1, 200, "MPEG_LAYER_III")


PROMPT_LIMIT = ("at most 30 s",)


@dataclass(frozen=True)
class AudioCase:
    id: str
    filename: str
    make: Callable[[], bytes]
    expect: Refusal | None
    over_cap: bool = False  # refused by the upload cap before anything reads it


AUDIO_CASES = (
    AudioCase("zero-byte", "voice.wav", lambda: b"",
              Refusal("audio_unreadable", ("could not be read", "empty"))),
    AudioCase("truncated-riff-header", "voice.wav", lambda: wav_bytes(voice())[:20],
              Refusal("audio_unreadable", UNREADABLE)),
    AudioCase("header-without-samples", "voice.wav", lambda: wav_bytes(np.zeros(0, np.float32)),
              Refusal("audio_unreadable", ("no audio samples",))),
    AudioCase("text-named-wav", "voice.wav", lambda: b"this is a text file, not audio\n" * 20,
              Refusal("audio_unreadable", UNREADABLE)),
    AudioCase("random-bytes", "voice.ogg", lambda: np.random.default_rng(7).bytes(8000),
              Refusal("audio_unreadable", UNREADABLE)),
    AudioCase("wav-named-mp3", "voice.mp3", lambda: wav_bytes(voice()), None),  # the content decides, not the name
    AudioCase("flac-named-wav", "voice.wav", lambda: wav_bytes(voice(), fmt="FLAC"), None),
    AudioCase("8-khz", "voice.wav", lambda: wav_bytes(voice(4.0, 8000), 8000),
              Refusal("prompt_low_rate", ("8000 Hz", "16000 Hz"))),
    AudioCase("1-second", "voice.wav", lambda: wav_bytes(voice(1.0)),
              Refusal("prompt_too_short", ("1.0 s", "at least 3 seconds"))),
    AudioCase("31-seconds", "voice.wav", lambda: wav_bytes(voice(31.0)),
              Refusal("prompt_too_long", ("31.0 s", "at most 30 s"))),
    AudioCase("10-minutes", "voice.flac", ten_minutes_flac, Refusal("prompt_too_long", ("600.0 s", "at most 30 s"))),
    AudioCase("stereo-44k", "voice.wav", lambda: wav_bytes(np.stack([voice(4.0, 44100), voice(4.0, 44100) * 0.5], 1),
                                                           44100), None),
    AudioCase("float32", "voice.wav", lambda: wav_bytes(voice(), subtype="FLOAT"), None),
    AudioCase("nan-samples", "voice.wav", lambda: wav_bytes(_with(voice(), 5, np.nan), subtype="FLOAT"),
              Refusal("audio_unreadable", ("invalid samples", "NaN"))),
    AudioCase("inf-samples", "voice.wav", lambda: wav_bytes(_with(voice(), 9, np.inf), subtype="FLOAT"),
              Refusal("audio_unreadable", ("invalid samples", "infinity"))),
    AudioCase("silence", "voice.wav", lambda: wav_bytes(np.zeros(4 * 16000, np.float32)),
              Refusal("prompt_silent", ("silent", "microphone"))),
    AudioCase("clipping", "voice.wav", lambda: wav_bytes(np.clip(voice() * 20, -1, 1)), None),
    AudioCase("dc-offset", "voice.wav", lambda: wav_bytes(voice() * 0.5 + 0.4), None),
    AudioCase("8-channel-bomb", "voice.flac", eight_channel_bomb,
              Refusal("prompt_too_long", ("390.0 s", *PROMPT_LIMIT))),
    AudioCase("1-hour-flac", "voice.flac", hour_of_flac, Refusal("prompt_too_long", ("3600.0 s", *PROMPT_LIMIT))),
    # The header cannot refuse it: the running cap stops the decoding past the prompt door's 120 s.
    AudioCase("flac-without-length", "voice.flac", flac_without_length,
              Refusal("prompt_too_long", ("more than", *PROMPT_LIMIT))),
    AudioCase("wav-header-claims-more", "voice.wav", wav_claiming_more, None),
    AudioCase("384-khz", "voice.flac", lambda: silence_file("FLAC", 384000, 1, 1.0),
              Refusal("audio_rate_unsupported", ("384000 Hz", "192000 Hz"))),
    AudioCase("768-khz", "voice.wav", lambda: silence_file("WAV", 768000, 1, 0.25),
              Refusal("audio_rate_unsupported", ("768000 Hz", "16, 24 or 48 kHz"))),
    AudioCase("200-channels", "voice.wav", lambda: silence_file("WAV", 16000, 200, 0.1),
              Refusal("audio_too_many_channels", ("200 channels", "at most 8"))),
    AudioCase("192-khz-stereo-40-s", "voice.flac", lambda: silence_file("FLAC", 192000, 2, 40),
              Refusal("audio_too_large", ("too large", "192000 Hz", "mono"))),
    AudioCase("vorbis-10-minutes", "voice.ogg", vorbis_bomb, Refusal("prompt_too_long", ("600.0 s", *PROMPT_LIMIT))),
    AudioCase("mp3-200-s", "voice.mp3", mp3_bomb, Refusal("prompt_too_long", PROMPT_LIMIT)),
    AudioCase("over-upload-cap", "voice.wav", _over_cap,
              Refusal("payload_too_large", ("larger than", f"{UPLOAD_CAP_MB} MB"), status=413), over_cap=True),
)

# --- text -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextCase:
    id: str
    text: str
    expect: Refusal | None


EMPTY = Refusal("text_empty", ("empty",))

TEXT_CASES = (
    TextCase("empty", "", EMPTY),
    TextCase("whitespace", " \t\n \u3000 ", EMPTY),
    TextCase("only-control-characters", "\x00\x01\x07\x1b\u200b", Refusal("text_empty", ("control characters",))),
    TextCase("100k-characters", "x" * 100_000, Refusal("text_too_long", ("100000 characters", "limit"))),
    TextCase("only-emoji", "😀🎉👍", Refusal("text_unspeakable", ("nothing to speak",))),
    TextCase("lone-surrogate", "Hello \ud800 there.", Refusal("text_invalid", ("invalid character", "U+D800"))),
    TextCase("emoji-in-a-sentence", "Hello 😀 world 🎉.", None),
    TextCase("right-to-left", "مرحبا بالعالم، كيف حالك؟", None),
    TextCase("bidi-override", "\u202eevil\u202c hello there.", None),
    TextCase("control-characters-inside", "Hello\x00 there\x07 \x1b[31mworld\x1b[0m.", None),
    TextCase("sql-looking", "'; DROP TABLE voices; -- OR 1=1", None),
    TextCase("html-looking", "<script>alert('x')</script><img src=x onerror=alert(1)>", None),
    TextCase("only-tags", "[breath][laughter]<strong></strong>", None),
    TextCase("only-endofprompt", "<|endofprompt|>", None),
)

# --- names and values ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueCase:
    """One bad value for one field, on every surface that takes it: `codes` maps a surface ("rest", "ui",
    "cli") to the code it answers with (argparse's own refusal is "argparse"); `words` hold on all of them."""

    id: str
    field: str
    value: object
    words: tuple[str, ...]
    codes: dict[str, str] = field(default_factory=dict)


TRAVERSAL = "../../../etc/passwd"

VALUE_CASES = (
    ValueCase("unknown-speaker", "speaker", "nobody", ("unknown speaker", "nobody"),
              {"rest": "speaker_unknown", "ui": "speaker_unknown", "cli": "speaker_unknown"}),
    ValueCase("traversal-speaker", "speaker", TRAVERSAL, ("unknown speaker",),
              {"rest": "speaker_unknown", "ui": "speaker_unknown", "cli": "speaker_unknown"}),
    ValueCase("unknown-saved-voice", "voice", "ghost", ("no saved voice", "ghost"),
              {"rest": "voice_unknown", "ui": "voice_unknown", "cli": "voice_unknown"}),
    ValueCase("traversal-saved-voice", "voice", TRAVERSAL, ("no saved voice",),
              {"rest": "voice_unknown", "ui": "voice_unknown", "cli": "voice_unknown"}),
    ValueCase("mode-the-model-cannot-do", "mode", "instruct", ("cannot do instruct", "Instruct"),
              {"rest": "mode_unsupported", "ui": "mode_unsupported", "cli": "mode_unsupported"}),
    ValueCase("unknown-mode", "mode", "karaoke", ("karaoke",), {"rest": "mode_unknown", "cli": "argparse"}),
    ValueCase("speed-nan", "speed", float("nan"), ("speed", "nan"),
              {"rest": "speed_out_of_range", "ui": "speed_out_of_range", "cli": "speed_out_of_range"}),
    ValueCase("speed-infinite", "speed", float("inf"), ("speed", "inf"),
              {"rest": "speed_out_of_range", "ui": "speed_out_of_range", "cli": "speed_out_of_range"}),
    ValueCase("speed-negative", "speed", -1.0, ("speed", "-1.0", "0.5-2.0"),
              {"rest": "speed_out_of_range", "ui": "speed_out_of_range", "cli": "speed_out_of_range"}),
    ValueCase("speed-huge", "speed", 1e300, ("speed", "0.5-2.0"),
              {"rest": "speed_out_of_range", "ui": "speed_out_of_range", "cli": "speed_out_of_range"}),
    ValueCase("speed-a-string", "speed", "fast", ("speed",),
              {"rest": "invalid_field", "ui": "speed_invalid", "cli": "argparse"}),
    ValueCase("seed-nan", "seed", float("nan"), ("seed",), {"rest": "invalid_field", "ui": "seed_invalid",
                                                           "cli": "argparse"}),
    ValueCase("seed-negative", "seed", -5, ("seed",), {"rest": "invalid_field", "ui": "seed_out_of_range",
                                                       "cli": "seed_out_of_range"}),
    ValueCase("seed-huge", "seed", 2**40, ("seed",), {"rest": "invalid_field", "ui": "seed_out_of_range",
                                                     "cli": "seed_out_of_range"}),
    ValueCase("seed-a-string", "seed", "lucky", ("seed",), {"rest": "invalid_field", "ui": "seed_invalid",
                                                           "cli": "argparse"}),
    ValueCase("unknown-format", "format", "exe", ("format", "exe"), {"rest": "bad_format", "ui": "bad_format",
                                                                     "cli": "bad_format"}),
)


def value_cases(surface: str) -> list[ValueCase]:
    return [case for case in VALUE_CASES if surface in case.codes]
