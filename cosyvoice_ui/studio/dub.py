"""A dubbing project: a video (or audio) file, its cues in the target language, and one take per cue in the
original speakers' voices, kept in a folder so that a stopped job resumes where it was.

    FOLDER/dub.json     the state (written atomically): the media (path, size, length, streams), the settings
                        (languages, fit policy, mix), each speaker's voice, the cue table (time, text, speaker,
                        mode, fit, takes, chosen take, lock, the last fit's overrun)
    FOLDER/voices/      each speaker's voice cut from the source (or a sample recording the user gave)
    FOLDER/takes/       the cues' takes as rendered (raw: silent edges trimmed, nothing else)
    FOLDER/fitted/      takes fitted to their cues (a cache, rebuilt when missing)

A speaker's voice is by default their own audio cut from the source: their longest clean cue (`dub_clean.py`:
alone, not clipped, well above the noise, mostly speech), joined with their next longest clean ones while it is
under `TARGET_VOICE_S`, at most `MAX_VOICE_S`; other cues only when the clean ones are too short. A saved voice,
a preset or a sample recording may be chosen instead (`set_voice`). The mode of a cue (`DubCue.mode`, "auto" by
default): cross-lingual when the target language differs from the source's, or is not known; zero-shot with the
cut's own transcript when they are the same (the subtitles then say what the source says); instruct when the cue
asks.

Rendering and export are in `dub_render.py`; cues and the fit policy in `dub_cues.py`; ffmpeg in `dub_media.py`.

Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ..audio import OWN_AUDIO_LIMITS, encode, read_audio, trim_silence
from ..errors import InvalidRequest
from ..files import write_atomic
from ..types import Audio, EngineInfo
from .dub_clean import CueSound, measure, near_another_speaker
from .dub_cues import DubCue, DubTake, FitPolicy, check_cues
from .dub_media import probe, read_clip
from .voice_map import VoiceChoice

log = logging.getLogger(__name__)

STATE_FILE = "dub.json"
VERSION = 1
VOICE_RATE = 24000  # the rate a speaker's voice is cut at (every family reads a 16-24 kHz prompt)
MIN_VOICE_S = 3.0  # the least a clone needs (audio.MIN_PROMPT_SECONDS)
TARGET_VOICE_S = 5.0  # more of the speaker's cues are joined while the cut is shorter than this
MAX_VOICE_S = 10.0
MAX_EXAMINED = 20  # a speaker's longest cues read to find clean ones (a 30-minute film's lead has hundreds)
JOIN_GAP_S = 0.15
ORIGINAL_MODES = ("duck", "replace")


@dataclass
class DubSettings:
    """The project's choices: the languages (ISO 639-1 like "en", or "und" when unknown), the fit policy, what
    happens to the original sound under the dub (ducked by `duck_db`, or replaced) and the seed of first takes."""

    source_lang: str = "und"
    target_lang: str = "und"
    policy: FitPolicy = field(default_factory=FitPolicy)
    original: str = "duck"
    duck_db: float = 12.0
    seed: int = 1

    def __post_init__(self) -> None:
        if self.original not in ORIGINAL_MODES:
            raise InvalidRequest("dub_original_mode", f"the original sound is {self.original!r}; choose duck (kept, "
                                 "quieter under the dub) or replace", value=self.original)
        if not 0.0 <= float(self.duck_db) <= 60.0:
            raise InvalidRequest("dub_duck_range", f"ducking by {self.duck_db} dB is not allowed; pick 0-60 dB "
                                 "(12 is usual)", value=self.duck_db)

    @property
    def same_language(self) -> bool:
        return self.source_lang not in ("", "und") and self.source_lang == self.target_lang

    def to_dict(self) -> dict:
        data = asdict(self)
        data["policy"] = asdict(self.policy)
        return data

    @classmethod
    def from_dict(cls, data: dict | None) -> DubSettings:
        data = data if isinstance(data, dict) else {}
        return cls(str(data.get("source_lang") or "und"), str(data.get("target_lang") or "und"),
                   FitPolicy.from_dict(data.get("policy")), str(data.get("original") or "duck"),
                   float(data.get("duck_db", 12.0)), int(data.get("seed", 1)))


@dataclass
class SourceVoice:
    """A speaker's voice cut from the source: the file in `voices/`, its length, what it says when known, whether
    only clean cues went into it (None: cut before cues were checked) and which cues did."""

    file: str
    seconds: float
    transcript: str = ""
    clean: bool | None = None
    cues: list[str] = field(default_factory=list)


class DubProject:
    """The folder of one dubbing job (see the module). `create` checks the media and the cues; `open` reads it
    back; `save` writes the state atomically (after every cue's take)."""

    def __init__(self, folder: Path, media: dict, settings: DubSettings, cues: list[DubCue],
                 voices: dict[str, VoiceChoice] | None = None, sources: dict[str, SourceVoice] | None = None) -> None:
        self.folder = Path(folder)
        self.media = media
        self.settings = settings
        self.cues = cues
        self.voices = dict(voices or {})
        self.sources = dict(sources or {})

    # --- the folder ----------------------------------------------------------------------------------------

    @property
    def media_path(self) -> Path:
        return Path(self.media["path"])

    @property
    def duration(self) -> float:
        return float(self.media["duration"])

    @property
    def takes_dir(self) -> Path:
        return self.folder / "takes"

    @property
    def voices_dir(self) -> Path:
        return self.folder / "voices"

    @property
    def fitted_dir(self) -> Path:
        return self.folder / "fitted"

    @classmethod
    def create(cls, folder: Path, media_path: Path, cues: list[DubCue], settings: DubSettings | None = None,
               voices: dict[str, VoiceChoice] | None = None) -> DubProject:
        """A new project over `media_path` with `cues` (refused when the media cannot be read, has no sound, or a
        cue is outside it or overlaps another)."""
        media_path = Path(media_path)
        info = probe(media_path)
        check_cues(cues, info.duration)
        media = {"path": str(media_path.resolve()), "name": media_path.name, "size": media_path.stat().st_size,
                 "duration": info.duration, "video_codec": info.video_codec, "width": info.width,
                 "height": info.height}
        project = cls(folder, media, settings or DubSettings(), cues, voices)
        project.folder.mkdir(parents=True, exist_ok=True)
        project.save()
        return project

    @classmethod
    def open(cls, folder: Path) -> DubProject:
        folder = Path(folder)
        try:
            data = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
            cues = [DubCue.from_dict(c) for c in data["cues"]]
            voices = {str(k): VoiceChoice.from_dict(v) for k, v in (data.get("voices") or {}).items()}
            sources = {str(k): SourceVoice(**v) for k, v in (data.get("sources") or {}).items()}
            return cls(folder, dict(data["media"]), DubSettings.from_dict(data.get("settings")), cues, voices,
                       sources)
        except FileNotFoundError:
            raise InvalidRequest("dub_project_missing", f"there is no dubbing project in {folder.name!r} (no "
                                 f"{STATE_FILE}); start one with the video and its subtitles",
                                 folder=folder.name) from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("the dubbing project cannot be read: %s", type(exc).__name__)
            raise InvalidRequest("dub_project_damaged", f"the dubbing project in {folder.name!r} cannot be read "
                                 f"({STATE_FILE} is damaged); start it again in a new folder",
                                 folder=folder.name) from None

    @staticmethod
    def exists(folder: Path) -> bool:
        return (Path(folder) / STATE_FILE).is_file()

    def save(self) -> None:
        data = {"version": VERSION, "media": self.media, "settings": self.settings.to_dict(),
                "voices": {k: v.to_dict() for k, v in self.voices.items()},
                "sources": {k: asdict(v) for k, v in self.sources.items()},
                "cues": [c.to_dict() for c in self.cues]}
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomic(self.folder / STATE_FILE, json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8"))

    def same_media(self, media_path: Path) -> bool:
        """Whether `media_path` is the file this project dubs (same name and size)."""
        path = Path(media_path)
        return path.name == self.media.get("name") and path.is_file() and path.stat().st_size == self.media["size"]

    def update_cues(self, cues: list[DubCue]) -> int:
        """Take `cues` (a subtitle file read again), keeping the takes, lock and settings of every cue whose time
        and speaker are unchanged (a take of other words is redone by `needs_render`). Returns how many cues are
        new or edited."""
        check_cues(cues, self.duration)
        old = {(round(c.start, 3), round(c.end, 3), c.speaker): c for c in self.cues}
        changed = 0
        for cue in cues:
            before = old.get((round(cue.start, 3), round(cue.end, 3), cue.speaker))
            if before is None:
                changed += 1
                continue
            changed += before.text != cue.text
            cue.takes, cue.chosen, cue.locked = before.takes, before.chosen, before.locked
            cue.mode, cue.instruct, cue.fit = before.mode, before.instruct, before.fit
            cue.id = before.id
        taken = {c.id for c in cues if c.takes}
        for number, cue in enumerate(cues, start=1):  # new cues get ids no kept cue has
            if not cue.takes and cue.id in taken:
                cue.id = f"c{number:04d}n{len(taken)}"
        self.cues = cues
        if {c.speaker for c in cues} != set(self.sources):
            self.sources = {}  # the cuts follow the cues; they are made again
        return changed

    # --- cues and takes ----------------------------------------------------------------------------------

    def cue(self, cue_id: str) -> DubCue:
        for cue in self.cues:
            if cue.id == cue_id:
                return cue
        raise InvalidRequest("dub_cue_unknown", f"there is no cue {cue_id!r} in this project", cue=cue_id)

    def speakers(self) -> list[str]:
        return list(dict.fromkeys(c.speaker for c in self.cues))

    def needs_render(self, cue: DubCue, info: EngineInfo) -> bool:
        """Whether `cue` lacks a finished take for what it now says, in its voice and mode, on this model."""
        if cue.locked:
            return False
        take = cue.take
        return take is None or take.key != self.take_key(cue, info) or not (self.takes_dir / take.file).is_file()

    def take_key(self, cue: DubCue, info: EngineInfo) -> str:
        """What a take of `cue` is made from: words, voice (a cut by its transcript), mode, instruction, model."""
        choice = self.voices.get(cue.speaker)
        voice = choice.identity() if choice is not None else {"source": cue.speaker}
        data = [cue.text, voice, cue.mode, cue.instruct, info.name, self.settings.same_language]
        return hashlib.sha256(json.dumps(data, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:16]

    def add_take(self, cue: DubCue, samples: np.ndarray, rate: int, seed: int, key: str,
                 check: dict | None = None) -> DubTake:
        """Store a new take of `cue` (its silent edges trimmed, written atomically) and choose it."""
        trimmed = trim_silence(Audio(np.asarray(samples, np.float32), rate), pad_s=0.0).samples
        number = max((t.number for t in cue.takes), default=0) + 1
        file = f"{cue.id}_{number:03d}.flac"
        self.takes_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.takes_dir / file, encode(trimmed, rate, "flac"))
        take = DubTake(number, int(seed), file, len(trimmed) / rate, key, cue.text, dict(check or {}))
        cue.takes.append(take)
        cue.chosen = number
        return take

    def take_audio(self, take: DubTake) -> Audio:
        path = self.takes_dir / take.file
        if not path.is_file():
            raise InvalidRequest("take_missing", f"the audio of take {take.file} is missing; render the cue again",
                                 take=take.number)
        return read_audio(path, what="take", limits=OWN_AUDIO_LIMITS)

    def choose(self, cue_id: str, number: int) -> None:
        cue = self.cue(cue_id)
        if not any(t.number == number for t in cue.takes):
            place = self.cues.index(cue) + 1
            raise InvalidRequest("take_unknown", f"cue {place} has no take {number} (it has "
                                 f"{len(cue.takes)})", take=number, cue=place)
        cue.chosen = number

    def lock(self, cue_id: str, locked: bool = True) -> None:
        self.cue(cue_id).locked = bool(locked)

    # --- voices ----------------------------------------------------------------------------------------

    def set_voice(self, speaker: str, choice: VoiceChoice, sample: Audio | None = None) -> None:
        """Give `speaker` a chosen voice (a sample recording is stored in `voices/`) instead of the source cut."""
        if choice.kind == "sample":
            if sample is None:
                raise InvalidRequest("voice_sample_missing", f"the sample recording of {speaker} is missing",
                                     speaker=speaker)
            name = f"chosen_{_file_name(speaker)}.flac"
            self.voices_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(self.voices_dir / name, encode(sample.samples, sample.sample_rate, "flac"))
            choice = replace(choice, value=name)
        self.voices[speaker] = choice

    def voice_of(self, cue: DubCue) -> tuple[VoiceChoice, Audio | None]:
        """The voice `cue` is spoken in and its sample recording (None for a saved voice or a preset): the chosen
        one, else the speaker's cut from the source; the mode picks its transcript (see the module)."""
        choice = self.voices.get(cue.speaker)
        if choice is None:
            source = self.source_voice(cue.speaker)
            transcript = source.transcript if self.settings.same_language else ""
            choice = VoiceChoice("sample", source.file, transcript)
        sample = self._sample(choice) if choice.kind == "sample" else None
        if cue.mode == "cross_lingual":
            choice = replace(choice, transcript="")
        elif cue.mode == "zero_shot" and not choice.transcript.strip():
            raise InvalidRequest("dub_transcript_missing", f"{cue.speaker}'s voice has no transcript, so zero-shot "
                                 "cannot be used; set the cue's mode to cross_lingual or auto, or give the source "
                                 "language (it is the target's: the subtitles then say what the source says)",
                                 speaker=cue.speaker)
        if cue.mode == "instruct" or cue.instruct.strip():
            if not cue.instruct.strip():
                place = self.cues.index(cue) + 1 if cue in self.cues else 0
                raise InvalidRequest("dub_instruct_missing", f"cue {place} is in instruct mode without an "
                                     "instruction; write one (e.g. \"Speak softly.\") or set the mode to auto",
                                     cue=place)
            choice = replace(choice, instruct=cue.instruct.strip())
        return choice, sample

    def _sample(self, choice: VoiceChoice) -> Audio:
        return read_audio(self.voices_dir / choice.value, what="sample recording")

    def source_voice(self, speaker: str) -> SourceVoice:
        """The speaker's voice cut from the source (made once, then kept): their longest clean cue (alone, not
        clipped, well above the noise, mostly speech: `dub_clean.py`), joined with their next longest clean ones
        while under `TARGET_VOICE_S`, at most `MAX_VOICE_S`. Only when their clean cues come to less than
        `MIN_VOICE_S` are the others joined too (clean first, then by length), and the record says so
        (`SourceVoice.clean` False). Refused when they speak under `MIN_VOICE_S` in all."""
        known = self.sources.get(speaker)
        if known is not None and (self.voices_dir / known.file).is_file():
            return known
        examined = self._examined(speaker)
        clean = [(cue, clip) for cue, clip, sound in examined if sound.clean]
        pieces, texts, used, whole = _joined(clean)
        total = sum(len(p) for p in pieces) / VOICE_RATE
        if total < MIN_VOICE_S:
            pieces, texts, used, whole = _joined(clean + [(cue, clip) for cue, clip, sound in examined
                                                          if not sound.clean])
            total = sum(len(p) for p in pieces) / VOICE_RATE
        if total < MIN_VOICE_S:
            raise InvalidRequest("dub_voice_too_short", f"{speaker} speaks for only {total:.1f} s in the source; a "
                                 f"voice needs at least {MIN_VOICE_S:g} s, so give {speaker} a saved voice, a preset "
                                 "or a sample recording", speaker=speaker, seconds=round(total, 2))
        problems = {cue.id: sound.problems for cue, _, sound in examined if cue.id in used and not sound.clean}
        number = {cue.id: place for place, cue in enumerate(self.cues, start=1)}
        if problems:
            log.warning("%s's voice is cut from cues that are not clean (too few clean ones): %s", speaker,
                        "; ".join(f"cue {number[cue_id]} {', '.join(found)}" for cue_id, found in problems.items()))
        name = f"source_{_file_name(speaker)}.flac"
        self.voices_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.voices_dir / name, encode(np.concatenate(pieces), VOICE_RATE, "flac"))
        source = SourceVoice(name, round(total, 3), " ".join(texts) if whole else "", not problems, used)
        self.sources[speaker] = source
        return source

    def _examined(self, speaker: str) -> list[tuple[DubCue, np.ndarray, CueSound]]:
        """The speaker's longest cues (at most `MAX_EXAMINED`, longest first), each with its sound (up to
        `MAX_VOICE_S`) and what it measures; reading stops once the clean ones hold enough for any cut."""
        own = sorted((c for c in self.cues if c.speaker == speaker), key=lambda c: c.seconds, reverse=True)
        examined, clean_seconds = [], 0.0
        for cue in own[:MAX_EXAMINED]:
            clip = read_clip(self.media_path, cue.start, min(cue.seconds, MAX_VOICE_S), VOICE_RATE)
            sound = measure(clip, VOICE_RATE, near_another_speaker(cue, self.cues))
            examined.append((cue, clip, sound))
            clean_seconds += cue.seconds if sound.clean else 0.0
            if clean_seconds >= MAX_VOICE_S:
                break
        return examined


def _joined(candidates: list[tuple[DubCue, np.ndarray]]) -> tuple[list[np.ndarray], list[str], list[str], bool]:
    """The cut from `candidates` in their order: each one's sound (silent edges trimmed, `JOIN_GAP_S` between)
    while the cut is under `TARGET_VOICE_S`, at most `MAX_VOICE_S`. Returns the pieces, their words, the cues
    used and whether every cue went in whole (only then are the words the cut's transcript)."""
    pieces, texts, used, total, whole = [], [], [], 0.0, True
    for cue, clip in candidates:
        seconds = min(cue.seconds, MAX_VOICE_S - total)
        if seconds < 0.5:
            break
        clip = clip[:int(round(seconds * VOICE_RATE))]
        clip = trim_silence(Audio(clip, VOICE_RATE), pad_s=0.05).samples if len(clip) else clip
        if not len(clip):
            continue
        if pieces:
            pieces.append(np.zeros(int(JOIN_GAP_S * VOICE_RATE), np.float32))
        pieces.append(clip)
        texts.append(cue.source_text or cue.text)
        used.append(cue.id)
        whole = whole and seconds >= cue.seconds - 1e-3
        total = sum(len(p) for p in pieces) / VOICE_RATE
        if total >= TARGET_VOICE_S:
            break
    return pieces, texts, used, whole


def _file_name(name: str) -> str:
    slug = re.sub(r"[^\w-]+", "_", str(name).strip(), flags=re.UNICODE).strip("_")[:40] or "speaker"
    digest = hashlib.sha256(str(name).encode()).hexdigest()[:6]  # "Bob!" and "Bob?" keep their own files
    return f"{slug}_{digest}"

