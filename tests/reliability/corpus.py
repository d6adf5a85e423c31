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
