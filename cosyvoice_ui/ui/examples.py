"""Ready-made voice samples for newcomers: the built-in example voice (shipped, recorded once by the offline
default voice) and a second speaker for voice conversion (recorded by the offline voice on first use)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np

from .. import audio as audio_utils
from ..serving.default_voice import builtin_audio, builtin_available, builtin_transcript
from ..errors import CosyVoiceError
from ..serving.backends import OFFLINE_ID, describe, load_any
from ..types import Mode, SynthesisRequest

log = logging.getLogger(__name__)

EXAMPLE_TEXT = "Hello! This is my cloned voice, reading a sentence I have never said before."
# A second recording by another preset speaker: the "speech to convert" of the voice-conversion example.
SOURCE_TRANSCRIPT = "Voice conversion keeps these words and their timing, but changes who says them."
_lock = threading.Lock()


def example_available(which: int = 0) -> bool:
    """True when the example recording `which` exists or can be recorded without a download."""
    if which == 0 and builtin_available():
        return True
    try:
        describe(OFFLINE_ID)
    except CosyVoiceError:
        return False
    return True


def example_voice(folder: Path, which: int = 0) -> tuple[str, str]:
    """(path of a ~5 s example recording, its transcript); made on first use, then reused.

    which=0: the voice to clone; which=1: another speaker saying other words (voice conversion).
    """
    transcript = (builtin_transcript(), SOURCE_TRANSCRIPT)[which]
    path = folder / f"example_voice_{which}.wav"
    with _lock:
        if which == 0 and not path.is_file() and builtin_available():
            voice = builtin_audio()
            folder.mkdir(parents=True, exist_ok=True)
            path.write_bytes(audio_utils.encode(voice.samples, voice.sample_rate, "wav"))
        if not path.is_file():
            engine = load_any(OFFLINE_ID)
            try:
                speakers = engine.info.speakers
                request = SynthesisRequest(Mode.SFT, text=transcript, speaker=speakers[which % len(speakers)], seed=1)
                wave = np.concatenate([c.samples for c in engine.synthesize(request)])
            finally:
                engine.close()
            folder.mkdir(parents=True, exist_ok=True)
            path.write_bytes(audio_utils.encode(wave, engine.info.sample_rate, "wav"))
            log.info("example voice recorded to %s", path)
    return str(path), transcript
