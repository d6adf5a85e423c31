"""Which voice speaks when a request names none, and the built-in example voice.

Every backend has a default voice, so `text` alone is a complete request everywhere (UI, REST, CLI):

    1. `--default-voice NAME` (a preset or a saved voice id), else the saved voice marked as default
       (`voices default ID`, `POST /v1/voices/{id}/default`);
    2. else the backend's own default preset (the offline voice names one), else its first preset;
    3. else, for a base model that can only clone (no presets), the built-in example voice: a short
       recording made once by the offline voice and shipped in `assets/`. Its prompt features are
       computed by the loaded model on first use and cached like a saved voice's.

The name "default" is accepted wherever a voice or speaker is named and means the voice above.
Nothing here imports torch.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from ..types import Mode, SynthesisRequest
from .voices import RESERVED_IDS, VoiceLibrary

if TYPE_CHECKING:
    from ..engine import Engine
    from ..types import Audio, EngineInfo

log = logging.getLogger(__name__)

DEFAULT_NAME, BUILTIN_ID = RESERVED_IDS  # never given to a saved voice; BUILTIN_ID is also its engine-side id
ASSETS = Path(__file__).resolve().parent / "assets"
BUILTIN_AUDIO = ASSETS / "builtin_voice.flac"
BUILTIN_META = ASSETS / "builtin_voice.json"
BUILTIN_CACHE_DIR = ".builtin"  # under the voices folder; a dot name is never listed as a saved voice
CLONE_MODES = (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC)


@dataclass(frozen=True)
class VoiceRef:
    """A voice a request can use: a preset speaker, a saved voice, or the built-in example voice."""

    kind: str  # "preset" | "saved" | "builtin"
    id: str  # the preset's name, the saved voice's id, or BUILTIN_ID
    transcript: str = ""

    @property
    def is_preset(self) -> bool:
        return self.kind == "preset"

    def to_dict(self) -> dict:
        return {"id": self.id, "kind": self.kind}


@lru_cache(maxsize=1)
def builtin_transcript() -> str:
    """What is said in the built-in example voice ("" when the asset is missing)."""
    try:
        return str(json.loads(BUILTIN_META.read_text(encoding="utf-8"))["transcript"])
    except (OSError, ValueError, KeyError):
        return ""


def builtin_available() -> bool:
    return BUILTIN_AUDIO.is_file() and bool(builtin_transcript())


def builtin_audio() -> Audio:
    from ..audio import read_audio

    return read_audio(BUILTIN_AUDIO, what="built-in example voice")


BUILTIN = VoiceRef("builtin", BUILTIN_ID)


class VoiceResolver:
    """Turns the voice a request names (or none) into a `VoiceRef`, and makes it usable on an engine.

    Not responsible for storing voices (`voices.VoiceLibrary`) or computing features (the engine's
    `register_voice`).
    """

    def __init__(self, library: VoiceLibrary | None = None, configured: str | None = None,
                 cache_root: Path | None = None) -> None:
        self.library = library
        self.configured = (configured or "").strip() or None
        root = cache_root if cache_root is not None else (library.root if library is not None else Path("voices"))
        self.builtin_dir = Path(root) / BUILTIN_CACHE_DIR

    # --- naming ------------------------------------------------------------------------------------

    def default(self, info: EngineInfo | None) -> VoiceRef | None:
        """The voice used when a request names none (None: this backend has no usable voice)."""
        for chosen in (self.configured, self.library.default_id() if self.library is not None else None):
            if chosen:
                ref = self._named(chosen, info)
                if ref is not None:
                    return ref
                log.warning("the default voice %r does not exist for this model; using the model's own", chosen)
        if info is None:
            return None
        if info.speakers:
            preferred = info.default_speaker
            return VoiceRef("preset", preferred if preferred in info.speakers else info.speakers[0])
        if any(mode in info.modes for mode in CLONE_MODES) and builtin_available():
            return replace(BUILTIN, transcript=builtin_transcript())
        return None

    def lookup(self, name: str | None, info: EngineInfo | None) -> VoiceRef | None:
        """The voice called `name`: "default" (or nothing), a preset, a saved voice, or "builtin"."""
        name = (name or "").strip()
        if not name or name == DEFAULT_NAME:
            return self.default(info)
        return self._named(name, info)

    def _named(self, name: str, info: EngineInfo | None) -> VoiceRef | None:
        if info is not None and name in info.speakers:
            return VoiceRef("preset", name)
        if self.library is not None:
            saved = self.library.get(name)
            if saved is not None:
                return VoiceRef("saved", saved.id, saved.transcript)
        if name == BUILTIN_ID and builtin_available():
            return replace(BUILTIN, transcript=builtin_transcript())
        return None

    # --- requests ----------------------------------------------------------------------------------

    def apply(self, request: SynthesisRequest, info: EngineInfo | None,
              mode_given: bool = True) -> tuple[SynthesisRequest, VoiceRef | None]:
        """Fill in the default voice where `request` names none (or names "default").

        Returns the request to run and the voice it now uses when that voice must be registered with
        the engine first (saved or built-in; None otherwise). `mode_given` False means the caller only
        inferred the mode, so a base model's default voice may turn an implied sft request into a clone.
        A request that names its own voice (a speaker, a recording) is returned unchanged.
        """
        named_default = request.speaker == DEFAULT_NAME
        if request.prompt_audio is not None or (request.speaker and not named_default):
            return request, None
        ref = self.default(info)
        if ref is None:
            return request, None
        mode = request.mode
        if mode is Mode.INSTRUCT and info is not None and info.instruct_voice:
            # CosyVoice2/3 follow an instruction in a cloned voice: the default voice is that voice.
            return (request, None) if ref.is_preset else (replace(request, speaker=ref.id), ref)
        if mode in (Mode.SFT, Mode.INSTRUCT):
            if ref.is_preset:
                return replace(request, speaker=ref.id), None
            if mode is Mode.INSTRUCT or mode_given:
                return request, None  # a preset is needed: validation names the choices
            mode = Mode.ZERO_SHOT if ref.transcript else Mode.CROSS_LINGUAL
        elif ref.is_preset:
            return request, None  # a clone mode needs a recording or a saved voice: validation says so
        if info is not None and mode not in info.modes and Mode.CROSS_LINGUAL in info.modes and not mode_given:
            mode = Mode.CROSS_LINGUAL
        return replace(request, mode=mode, speaker=ref.id), ref

    def usable_ids(self) -> tuple[str, ...]:
        """Voice ids a clone-mode request may name besides the saved ones."""
        return (BUILTIN_ID,) if builtin_available() else ()

    # --- engines -----------------------------------------------------------------------------------

    def ensure(self, engine: Engine, ref: VoiceRef | None) -> None:
        """Register a saved or built-in voice with `engine` unless it already knows it."""
        if ref is None or ref.is_preset or ref.id in engine.info.saved_voices:
            return
        if ref.kind == "builtin":
            self.builtin_dir.mkdir(parents=True, exist_ok=True)
            engine.register_voice(BUILTIN_ID, builtin_audio(), builtin_transcript(), self.builtin_dir)
            return
        library = self.library
        if library is None:
            return
        voice = library.require(ref.id)
        engine.register_voice(voice.id, library.audio(voice.id), voice.transcript, library.path(voice.id))
