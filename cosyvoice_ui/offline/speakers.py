"""Every voice the offline engine can speak with, and how a name or a recording becomes a style.

Three kinds of speaker, all resolved to a `VoiceStyle`:

    presets         the five stock Kokoro voices (the default first) and a few named blends
    library voices  the app's saved voices (`cosyvoice_ui.serving.voices.VoiceLibrary`, prompt recordings):
                    matched once when registered, the style kept in the voice's folder
    prompts         a recording in a clone request: matched, cached by audio hash (`MatchCache`)
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .. import audio as audio_utils
from ..engine import report
from ..errors import InvalidRequest
from ..types import Audio, ProgressCallback
from .anchors import calibration_key
from .store import MatchCache, MatchLevel, MatchResult, read_match, write_match
from .styles import NAMED_BLENDS, StyleSpace, VoiceStyle, describe

if TYPE_CHECKING:
    from .matching import VoiceMatcher

log = logging.getLogger(__name__)

# Listed first (UIs preselect the first speaker): the stock voice pocketsphinx understood best in English.
DEFAULT_SPEAKER = "jf_gongitsune"
# The style of a library voice, in the voice's folder; the "features-" prefix is what the app looks
# for to tell whether a voice is ready without loading a model.
LIBRARY_STYLE_FILE = "features-offline.json"


def preset_styles(names: tuple[str, ...]) -> dict[str, VoiceStyle]:
    """The preset speakers in display order: the default voice, the other stock voices, the named blends."""
    order = sorted(names, key=lambda n: n != DEFAULT_SPEAKER)  # stable sort: only the default moves
    presets = {n: VoiceStyle(weights={n: 1.0}) for n in order}
    presets.update({name: VoiceStyle(weights=dict(w)) for name, w in NAMED_BLENDS if set(w) <= set(names)})
    return presets


class OfflineSpeakers:
    """Names -> styles for the offline engine, plus voice matching with its caches.

    Does: list speakers, resolve a speaker, match a prompt (cached per recording), register /
    unregister the app's library voices. Does not: render audio or validate requests (see `engine`);
    the matcher is built by `matcher_factory` on first use.
    """

    def __init__(
        self,
        space: StyleSpace,
        voices_dir: Path,
        matcher_factory: Callable[[], VoiceMatcher],
        match_level: MatchLevel = "quick",
    ) -> None:
        self.space = space
        self.presets = preset_styles(space.names)
        self.cache = MatchCache(voices_dir)
        self.match_level: MatchLevel = match_level
        self.library: dict[str, VoiceStyle] = {}  # registered library voice id -> style
        self._matcher_factory = matcher_factory
        self._matcher: VoiceMatcher | None = None
        self._lock = threading.Lock()
        # Matches depend on the stock voices and the calibration sentences; a change invalidates them.
        digest = hashlib.sha256(space.packs.tobytes())
        digest.update(calibration_key().encode())
        self.fingerprint = digest.hexdigest()[:32]

    # -- listing and resolving ---------------------------------------------------------------------

    def names(self) -> tuple[str, ...]:
        """Presets, then registered library voices (a preset keeps its name over a library voice)."""
        return tuple(self.presets) + tuple(n for n in self.library if n not in self.presets)

    def style_of(self, speaker: str) -> VoiceStyle:
        """The style of any listed speaker; `InvalidRequest("speaker_unknown")` otherwise."""
        if speaker in self.presets:
            return self.presets[speaker]
        if speaker in self.library:
            return self.library[speaker]
        options = ", ".join(self.names())
        raise InvalidRequest(
            "speaker_unknown", f"unknown speaker {speaker!r}; choose one of: {options}", speaker=speaker, options=options
        )

    # -- matching ------------------------------------------------------------------------------------

    def matcher(self) -> VoiceMatcher:
        """The voice matcher, built on first use (loads the speaker encoder, about 1 s)."""
        with self._lock:
            if self._matcher is None:
                self._matcher = self._matcher_factory()
            return self._matcher

    def release(self) -> None:
        """Drop the matcher (speaker encoder); it is rebuilt if needed again."""
        with self._lock:
            self._matcher = None

    def match(
        self,
        prompt: Audio,
        level: MatchLevel | None = None,
        seed: int | None = None,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> MatchResult:
        """The style closest to `prompt`, cached per recording; a cached refine result serves quick requests too."""
        level = level or self.match_level
        prompt = audio_utils.check_prompt(prompt)  # the same trim as everywhere, so hashes agree
        key = audio_utils.audio_hash(prompt)
        cached = self.cache.cached_match(key, self.fingerprint)
        if cached is not None and (cached.level == "refine" or level == "quick"):
            report(progress, "voice_match", 1.0, "using the cached voice match")
            return cached
        result = self.matcher().match(prompt.samples, prompt.sample_rate, level=level, seed=seed, progress=progress, cancel=cancel)
        self.cache.cache_match(key, result, self.fingerprint)
        log.info(
            "voice match (%s): similarity %.3f (nearest stock voice %s %.3f) in %.1fs, %s",
            result.level, result.similarity, result.baseline_voice, result.baseline, result.seconds, describe(result.style),
        )
        return result

    # -- library voices ------------------------------------------------------------------------------

    def register(self, voice_id: str, audio: Audio, cache_dir: Path) -> MatchResult:
        """Give library voice `voice_id` a style: read it from `cache_dir`, else match `audio` and store it there."""
        path = Path(cache_dir) / LIBRARY_STYLE_FILE
        result = read_match(path, self.fingerprint)
        if result is None:
            result = self.match(audio)
            try:
                write_match(path, result, self.fingerprint)
            except OSError as exc:  # a read-only voices folder still works; it matches again next time
                log.warning("cannot store the style of voice %s in %s (%s)", voice_id, path, exc)
        self.library[voice_id] = result.style
        return result

    def unregister(self, voice_id: str) -> None:
        self.library.pop(voice_id, None)

