"""Saved voices meet the loaded model: register every stored voice with a new engine, save a voice (and
compute its features with the manager's model), delete one. The storage itself is `voices.VoiceLibrary`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..errors import CosyVoiceError, InvalidRequest
from ..types import Audio
from .voices import SavedVoice, VoiceLibrary

if TYPE_CHECKING:
    from ..engine import Engine
    from .manager import ModelManager

log = logging.getLogger(__name__)


def register_all(engine: Engine, library: VoiceLibrary) -> int:
    """Make every saved voice usable by `engine` (features loaded from disk, or computed and stored).

    Returns how many voices were registered. An engine that cannot use saved voices is skipped with
    one log line; a voice that fails is logged and skipped, so one bad folder never blocks a model load.
    """
    count = 0
    for voice in library.list():
        try:
            engine.register_voice(voice.id, library.audio(voice.id), voice.transcript, library.path(voice.id))
            count += 1
        except InvalidRequest as exc:
            if exc.code == "voices_unsupported":
                log.info("%s; %d saved voices not registered", exc.message, len(library.ids()))
                return count
            log.warning("saved voice %s could not be registered: %s", voice.id, exc)
        except CosyVoiceError as exc:
            log.warning("saved voice %s could not be registered: %s", voice.id, exc)
    if count:
        log.info("registered %d saved voices with %s", count, engine.info.name)
    return count


def save_voice(manager: ModelManager, library: VoiceLibrary, name: str, audio: Audio,
               transcript: str, consent: dict | None = None) -> tuple[SavedVoice, bool]:
    """Store a voice and compute its features with the manager's model (loading it if needed). `consent`: the
    record of its speaker's consent (`consent.Consent.record`), kept with the voice; surfaces save through
    `SpeechJobs.save_voice`, which checks the consent rule first.

    Returns (voice, features_ready); features_ready is False when the backend cannot use saved voices
    (the voice is kept for a CosyVoice model) or the model could not be loaded now. A recording the
    model cannot use at all (e.g. no speech tokens) is not kept.
    """
    info = manager.info()
    voice = library.add(name, audio, transcript, reserved=info.speakers if info else (), consent=consent)
    try:
        with manager.job() as engine:
            engine.register_voice(voice.id, library.audio(voice.id), voice.transcript, library.path(voice.id))
    except InvalidRequest as exc:
        if exc.code == "voices_unsupported":
            log.info("voice %s saved; %s", voice.id, exc.message)
            return voice, False
        library.remove(voice.id)
        raise
    except CosyVoiceError as exc:
        log.warning("voice %s saved, features not computed now: %s", voice.id, exc)
        return voice, False
    return voice, True


def delete_voice(manager: ModelManager, library: VoiceLibrary, voice_id: str) -> bool:
    """Remove a voice from disk and from the loaded engine. False if there was no such voice."""
    if not library.remove(voice_id):
        return False
    engine = manager.loaded
    if engine is not None:
        engine.unregister_voice(voice_id)
    return True
