"""Ready-made recordings for newcomers.

- The voice to clone: the built-in example voice, shipped with the app (`serving/default_voice.py`).
- The speech to convert (voice-conversion tab): another speaker saying other words. It is recorded once, as
  a job of the process's `ModelManager` (in the queue, on the model the user chose, counted in its memory
  figures) by one of that model's preset speakers other than its default, and then reused.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np

from .. import audio as audio_utils
from ..serving.default_voice import builtin_audio, builtin_available, builtin_transcript
from ..serving.manager import ModelManager
from ..types import EngineInfo, Mode, ProgressCallback, SynthesisRequest

log = logging.getLogger(__name__)

EXAMPLE_TEXT = "Hello! This is my cloned voice, reading a sentence I have never said before."
SOURCE_TRANSCRIPT = "Voice conversion keeps these words and their timing, but changes who says them."
VOICE_FILE, SOURCE_FILE = "example_voice_0.wav", "example_voice_1.wav"
_lock = threading.Lock()


def example_available() -> bool:
    """True when the example voice to clone is installed."""
    return builtin_available()


def source_speaker(info: EngineInfo | None) -> str | None:
    """The preset that records the speech to convert: one other than the model's default, so that it is not
    the voice it is converted to. None for a model without two presets."""
    if info is None or not info.supports(Mode.SFT) or len(info.speakers) < 2:
        return None
    default = info.default_speaker or info.speakers[0]
    return next(s for s in info.speakers if s != default)


def source_available(info: EngineInfo | None, folder: Path) -> bool:
    """True when the speech to convert is recorded already, or the model `info` describes can record it."""
    return example_available() and ((folder / SOURCE_FILE).is_file() or source_speaker(info) is not None)


def example_voice(folder: Path) -> tuple[str, str]:
    """(path, transcript) of the example voice to clone, as a wav file in `folder` (written on first use)."""
    path = folder / VOICE_FILE
    with _lock:
        if not path.is_file():
            voice = builtin_audio()
            folder.mkdir(parents=True, exist_ok=True)
            path.write_bytes(audio_utils.encode(voice.samples, voice.sample_rate, "wav"))
    return str(path), builtin_transcript()


def example_source(folder: Path, manager: ModelManager, progress: ProgressCallback | None = None,
                   cancel: threading.Event | None = None) -> str | None:
    """The path of the speech to convert; on first use it is recorded as a job of `manager` (it waits in the
    queue and loads the model like any request). None when the model has no second preset to record it."""
    path = folder / SOURCE_FILE
    with _lock:
        if path.is_file():
            return str(path)
        if source_speaker(manager.info()) is None:
            return None
        with manager.job(progress=progress, cancel=cancel) as engine:
            speaker = source_speaker(engine.info)
            if speaker is None:  # the loaded model has fewer presets than its description said
                return None
            request = SynthesisRequest(Mode.SFT, text=SOURCE_TRANSCRIPT, speaker=speaker, seed=1)
            wave = np.concatenate([c.samples for c in engine.synthesize(request, progress=progress, cancel=cancel)])
            rate = engine.info.sample_rate
        folder.mkdir(parents=True, exist_ok=True)
        path.write_bytes(audio_utils.encode(wave, rate, "wav"))
        log.info("example speech to convert recorded by preset %s", speaker)
    return str(path)
