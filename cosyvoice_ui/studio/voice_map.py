"""Which voice speaks each script name, and the request that makes a line in that voice.

A `VoiceChoice` is one of: the model's default voice, a saved voice, a preset speaker, or a sample
recording (kept in the project's `voices/` folder). Any of them may carry a style instruction: CosyVoice2/3
follow it in the chosen voice; CosyVoice-300M-Instruct follows it with a preset. `request_for` picks the mode
from the choice and what the loaded model can do, and refuses (`InvalidRequest`) a voice the model cannot use
before any work; `prepare` makes that request the checked speech job every surface runs (`serving.jobs`).
`VoiceMemory` remembers name → choice across projects.

Nothing here imports torch.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidRequest
from ..files import write_atomic
from ..known_models import mode_hint, models_for, name_list
from ..types import Audio, EngineInfo, Mode, SynthesisRequest

if TYPE_CHECKING:
    from ..serving.default_voice import VoiceRef, VoiceResolver
    from ..serving.jobs import JobOptions, SpeechJob, SpeechJobs

log = logging.getLogger(__name__)

VOICE_KINDS = ("default", "saved", "preset", "sample")


@dataclass(frozen=True)
class VoiceChoice:
    """The voice of one script name.

    kind: "default" (the model's default voice), "saved" (`value` = saved voice id), "preset" (`value` = preset
    speaker), "sample" (`value` = the recording's file name in the project's `voices/`; `transcript` = what is
    said in it, optional: without it the line is cloned cross-lingually). `instruct`: an optional style text.
    `consent`: a sample's speaker agreed to be cloned (a shared server asks: `serving/consent.py`).
    """

    kind: str = "default"
    value: str = ""
    transcript: str = ""
    instruct: str = ""
    consent: bool = False

    def __post_init__(self) -> None:
        check_kind(self.kind)

    def to_dict(self) -> dict:
        """The JSON form (`consent` only when given, so records written before it read the same)."""
        data = asdict(self)
        if not self.consent:
            del data["consent"]
        return data

    def identity(self) -> dict:
        """What makes a take of this voice: the choice without the consent (ticking it changes no take)."""
        return {key: value for key, value in asdict(self).items() if key != "consent"}

    @classmethod
    def from_dict(cls, data: dict | None) -> VoiceChoice:
        """A choice back from its JSON form (unknown keys ignored, an unknown kind refused)."""
        data = data or {}
        if not isinstance(data, dict):
            raise InvalidRequest("voice_choice_invalid", "a voice must be given as an object with a \"kind\" "
                                 "(default, saved, preset or sample)")
        return cls(kind=str(data.get("kind") or "default").strip().lower(), value=str(data.get("value") or ""),
                   transcript=str(data.get("transcript") or ""), instruct=str(data.get("instruct") or ""),
                   consent=data.get("consent") is True)

    def describe(self) -> str:
        """A short label for progress and lists, e.g. "preset 中文女", "sample bob.flac + instruction"."""
        label = self.kind if not self.value else f"{self.kind} {self.value}"
        return f"{label} + instruction" if self.instruct.strip() else label


def check_kind(kind: str) -> str:
    if kind not in VOICE_KINDS:
        raise InvalidRequest("voice_kind_unknown", f"unknown voice kind {kind!r}; choose one of: "
                             f"{', '.join(VOICE_KINDS)}", kind=str(kind), options=", ".join(VOICE_KINDS))
    return kind


def request_for(text: str, choice: VoiceChoice, info: EngineInfo, seed: int | None = None,
                sample_audio: Audio | None = None, speed: float = 1.0,
                saved_transcript: str | None = None) -> SynthesisRequest:
    """The request that says `text` in `choice`'s voice on the model described by `info`.

    Mode: an instruction → instruct (a voice on CosyVoice2/3, a preset on CosyVoice-300M-Instruct); a preset →
    sft; a saved voice or sample → zero_shot when its transcript is known (`saved_transcript` for a saved
    voice; None means unknown, so zero-shot is tried and the engine uses the stored transcript), else
    cross_lingual; the default voice → sft with no speaker, for `VoiceResolver.apply(mode_given=False)` to fill
    in (it turns into a clone on a model without presets). Raises `InvalidRequest` when the model cannot
    use the voice.
    """
    check_kind(choice.kind)
    instruct = choice.instruct.strip()
    base = SynthesisRequest(Mode.SFT, text=text, seed=seed, speed=speed)
    if instruct:
        _require_instruct(choice, info)
        base = replace(base, mode=Mode.INSTRUCT, instruct_text=instruct)
    if choice.kind == "default":
        return base
    if choice.kind == "preset":
        return _preset_request(base, choice, info)
    if choice.kind == "saved":
        if not choice.value.strip():
            raise InvalidRequest("voice_missing", "pick which saved voice speaks this name", kind="saved")
        _require_clone(choice, info)
        known = choice.transcript.strip() or saved_transcript
        transcript = known if known is not None else "?"  # "?": unknown, let the engine use the stored one
        mode = base.mode if instruct else _clone_mode(bool(transcript), info)
        # A transcript typed in the choice overrides the saved one; "" lets the engine use the stored one.
        override = choice.transcript.strip() if mode is Mode.ZERO_SHOT else ""
        return replace(base, mode=mode, speaker=choice.value.strip(), prompt_text=override)
    # sample
    if sample_audio is None:
        raise InvalidRequest("voice_sample_missing", f"the sample recording {choice.value or '(none)'!r} is "
                             "missing; record or upload it again for this name", sample=choice.value)
    _require_clone(choice, info)
    transcript = choice.transcript.strip()
    mode = base.mode if instruct else _clone_mode(bool(transcript), info)
    return replace(base, mode=mode, prompt_audio=sample_audio,
                   prompt_text=transcript if mode is Mode.ZERO_SHOT else "")


def prepare(text: str, choice: VoiceChoice, info: EngineInfo, speech: SpeechJobs, options: JobOptions,
            seed: int | None = None, sample_audio: Audio | None = None, speed: float = 1.0) -> SpeechJob:
    """The checked speech job that says `text` in `choice`'s voice: `request_for`, then `SpeechJobs.prepare`
    like every surface's request (glossary, default voice, blocked words, take policy, the one check). The one
    way studio code turns a choice into work; `render_on` registers its voice with the engine."""
    saved_transcript = None
    if choice.kind == "saved" and speech.library is not None:
        voice = speech.library.get(choice.value.strip())
        if voice is None:
            raise InvalidRequest("voice_unknown", f"there is no saved voice {choice.value!r}; save it first or "
                                 "pick another voice for this name", voice=choice.value)
        saved_transcript = voice.transcript
    request = request_for(text, choice, info, seed, sample_audio, speed, saved_transcript)
    builtin = _instructed_default(request, choice, info, speech.resolver)
    if builtin is not None:
        request = replace(request, speaker=builtin.id)
    # mode_given=False: a line for the default voice is an sft request the default may turn into a clone; a sample
    # carries its own consent (serving/consent.py decides whether it is needed)
    job = speech.prepare(request, replace(options, mode_given=False, consent=options.consent or choice.consent), info)
    return replace(job, voice=builtin) if builtin is not None else job


def _instructed_default(request: SynthesisRequest, choice: VoiceChoice, info: EngineInfo,
                        resolver: VoiceResolver) -> VoiceRef | None:
    """The built-in example voice for the default voice with an instruction on CosyVoice2/3, which follow an
    instruction in a cloned voice, when the default voice is a preset (or none); None when the default serves."""
    if choice.kind != "default" or request.mode is not Mode.INSTRUCT or not info.instruct_voice:
        return None
    default = resolver.default(info)
    if default is not None and not default.is_preset:
        return None
    from ..serving.default_voice import BUILTIN_ID

    builtin = resolver.lookup(BUILTIN_ID, info)
    if builtin is None:
        raise InvalidRequest("voice_unusable", f"{info.name} follows an instruction in a cloned voice; pick "
                             "a saved voice or a sample recording for this name", model=info.name, kind="default")
    return builtin


def choice_from_name(value: str, info: EngineInfo | None = None, saved: tuple[str, ...] = ()) -> VoiceChoice:
    """A choice from a plain voice name (a CLI `--voices` file, an API field): "default" (or ""), a preset of
    the model, or a saved voice id in `saved`; "preset:NAME" and "saved:ID" say which explicitly."""
    text = str(value or "").strip()
    kind, _, rest = text.partition(":")
    if rest and kind in ("preset", "saved"):
        return VoiceChoice(kind, rest.strip())
    if not text or text == "default":
        return VoiceChoice()
    if info is not None and text in info.speakers:
        return VoiceChoice("preset", text)
    if text in saved:
        return VoiceChoice("saved", text)
    presets = ", ".join(info.speakers) if info is not None and info.speakers else "none"
    raise InvalidRequest("voice_unknown", f"there is no preset or saved voice {text!r} (presets: {presets}; saved "
                         f"voices: {', '.join(saved) or 'none'})", voice=text)


def parse_voice_map(data: object, info: EngineInfo | None = None,
                    saved: tuple[str, ...] = ()) -> dict[str, VoiceChoice]:
    """A voice map from JSON: {"Alice": "preset name or saved id", "Bob": {"kind": "sample", "value": "bob.wav",
    "transcript": "...", "instruct": "..."}}. Raises `InvalidRequest` naming the first bad entry."""
    if not isinstance(data, dict):
        raise InvalidRequest("voice_map_invalid", "the voice map must be a JSON object of name → voice, e.g. "
                             "{\"Alice\": \"default\", \"Bob\": {\"kind\": \"saved\", \"value\": \"bob\"}}")
    out = {}
    for name, value in data.items():
        try:
            out[str(name).strip()] = (VoiceChoice.from_dict(value) if isinstance(value, dict)
                                      else choice_from_name(str(value), info, saved))
        except InvalidRequest as exc:
            raise InvalidRequest(exc.code, f"the voice of {name}: {exc.message}", **exc.params) from None
    return out


def _require_instruct(choice: VoiceChoice, info: EngineInfo) -> None:
    if Mode.INSTRUCT not in info.modes:
        raise InvalidRequest("voice_unusable", f"{info.name} cannot follow a style instruction; remove the "
                             f"instruction from this voice, or load {mode_hint(Mode.INSTRUCT)}", model=info.name,
                             kind=choice.kind)
    if info.instruct_voice and choice.kind == "preset":
        raise InvalidRequest("voice_unusable", f"{info.name} follows an instruction in a cloned voice, not with a "
                             "preset; pick a saved voice or a sample recording for this name", model=info.name,
                             kind=choice.kind)
    if not info.instruct_voice and choice.kind in ("saved", "sample"):
        voiced = name_list(models_for(Mode.INSTRUCT, instruct_voice=True)) or "a model that does"
        raise InvalidRequest("voice_unusable", f"{info.name} follows an instruction only with a preset speaker; "
                             f"pick a preset for this name, or load {voiced} to give a cloned voice an "
                             "instruction", model=info.name, kind=choice.kind)


def _preset_request(base: SynthesisRequest, choice: VoiceChoice, info: EngineInfo) -> SynthesisRequest:
    name = choice.value.strip()
    if not info.speakers or (base.mode is Mode.SFT and Mode.SFT not in info.modes):
        raise InvalidRequest("voice_unusable", f"{info.name} has no preset speakers (it clones voices); pick a "
                             f"saved voice or a sample recording for this name, or load {mode_hint(Mode.SFT)}",
                             model=info.name, kind="preset")
    if name not in info.speakers:
        options = ", ".join(info.speakers)
        raise InvalidRequest("speaker_unknown", f"{info.name} has no preset speaker {name!r}; choose one of: "
                             f"{options}", speaker=name, options=options)
    return replace(base, speaker=name)


def _require_clone(choice: VoiceChoice, info: EngineInfo) -> None:
    if Mode.ZERO_SHOT not in info.modes and Mode.CROSS_LINGUAL not in info.modes:
        what = "a saved voice" if choice.kind == "saved" else "a sample recording"
        raise InvalidRequest("voice_unusable", f"{info.name} cannot clone {what}; pick one of its preset speakers "
                             f"for this name, or load {mode_hint(Mode.ZERO_SHOT)}", model=info.name,
                             kind=choice.kind)


def _clone_mode(has_transcript: bool, info: EngineInfo) -> Mode:
    if has_transcript and Mode.ZERO_SHOT in info.modes:
        return Mode.ZERO_SHOT
    return Mode.CROSS_LINGUAL if Mode.CROSS_LINGUAL in info.modes else Mode.ZERO_SHOT


class VoiceMemory:
    """Remembers which voice each script name had, across projects, in one JSON file.

    Names match case-insensitively ("bob" finds "Bob"). A sample recording is remembered as a copy in the
    `<file stem>_samples/` folder beside the JSON, so a new project can reuse it.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.samples_dir = self.path.with_name(f"{self.path.stem}_samples")

    def all(self) -> dict[str, VoiceChoice]:
        """Every remembered name (as first written) → its choice; an unreadable file counts as empty."""
        out = {}
        for entry in self._read().values():
            try:
                out[entry["name"]] = VoiceChoice.from_dict(entry.get("choice"))
            except (InvalidRequest, KeyError, TypeError):
                continue
        return out

    def get(self, name: str) -> VoiceChoice | None:
        entry = self._read().get(_key(name))
        if not entry:
            return None
        try:
            return VoiceChoice.from_dict(entry.get("choice"))
        except InvalidRequest:
            return None

    def sample(self, name: str) -> Audio | None:
        """The remembered sample recording of `name` (None when it has none)."""
        choice = self.get(name)
        if choice is None or choice.kind != "sample":
            return None
        path = self.samples_dir / choice.value
        if not choice.value or not path.is_file():
            return None
        from ..audio import read_audio

        return read_audio(path, what="sample recording")

    def remember(self, name: str, choice: VoiceChoice, sample_audio: Audio | None = None) -> None:
        """Store `choice` for `name` (a sample's recording too, when given)."""
        data = self._read()
        if choice.kind == "sample" and sample_audio is not None and choice.value:
            from ..audio import encode

            self.samples_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(self.samples_dir / Path(choice.value).name,
                         encode(sample_audio.samples, sample_audio.sample_rate, "flac"))
            choice = replace(choice, value=Path(choice.value).name)
        data[_key(name)] = {"name": name.strip(), "choice": choice.to_dict()}
        self._write(data)

    def forget(self, name: str) -> None:
        data = self._read()
        if data.pop(_key(name), None) is not None:
            self._write(data)

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("the remembered voices cannot be read (%s); starting afresh", type(exc).__name__)
            return {}
        return data.get("voices", {}) if isinstance(data, dict) else {}

    def _write(self, voices: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"version": 1, "voices": voices}, ensure_ascii=False, indent=1)
        write_atomic(self.path, text.encode("utf-8"))


def _key(name: str) -> str:
    return " ".join(str(name).split()).casefold()
