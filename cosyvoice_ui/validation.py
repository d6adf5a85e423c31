"""Request checks every backend shares (text, speed, mode, speaker, prompt audio).

They need only an `EngineInfo`, not a loaded model, so the UI can stop a bad request before the
model is even loaded. Backends add their own checks on top (`Engine._check_model`). Which model can do a
mode comes from the table of known models (`known_models.py`, filled by the backends).
"""

from __future__ import annotations

import re
from dataclasses import fields

from . import audio as audio_utils
from . import known_models
from .errors import InvalidRequest
from .types import CheckedRequest, EngineInfo, Mode, SynthesisRequest

MIN_SPEED, MAX_SPEED = 0.5, 2.0
MAX_SEED = 2**31 - 1  # seeds are reported (X-Seed, history) and re-sent: one range for every surface
DEFAULT_MAX_TEXT_CHARS = 5000
END_OF_PROMPT = "<|endofprompt|>"
VOICE_MATCH_LEVELS = ("quick", "refine")
DEFAULT_INSTRUCT_EXAMPLE = "A female speaker with a calm, slow voice."


def mode_hint(mode: Mode, lang: str = "en") -> str:
    """The models to load for `mode` (named in "this model can't do that" messages), from the known models."""
    return known_models.mode_hint(mode, lang)


# Lone UTF-16 surrogates (a bad client's "\\ud800" escape, a broken copy) are not characters: no encoder can
# write them, so they would fail deep inside (cache keys, files, responses) instead of here.
_SURROGATE = re.compile("[\ud800-\udfff]")
_INVISIBLE = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]+")


def check_characters(value: str | None, what: str = "text", param: str = "text") -> None:
    """Refuse a string holding a lone surrogate, saying where it is."""
    found = _SURROGATE.search(value or "")
    if found:
        raise InvalidRequest("text_invalid", f"the {what} contains an invalid character (a lone surrogate, "
                             f"U+{ord(found.group()):04X}, at position {found.start() + 1}); remove it or copy the "
                             "text again from its source", what=what, param=param, position=found.start() + 1)


def check_text(text: str, max_chars: int = DEFAULT_MAX_TEXT_CHARS) -> None:
    check_characters(text)
    stripped = (text or "").strip()
    if not stripped:
        raise InvalidRequest("text_empty", "the text to speak is empty; type what the voice should say")
    if not _INVISIBLE.sub("", stripped):
        raise InvalidRequest("text_empty", "the text to speak holds only invisible control characters; type what "
                             "the voice should say")
    if len(stripped) > max_chars:
        raise InvalidRequest("text_too_long", f"the text has {len(stripped)} characters; the limit is {max_chars} "
                             "(split it, or raise --max-text-chars)", chars=len(stripped), limit=max_chars)


def check_speed(speed: float) -> None:
    if not (MIN_SPEED <= speed <= MAX_SPEED):
        raise InvalidRequest("speed_out_of_range", f"speed {speed} is outside {MIN_SPEED}-{MAX_SPEED}",
                             speed=speed, min=MIN_SPEED, max=MAX_SPEED)


def check_seed(seed: int | None) -> None:
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise InvalidRequest("seed_out_of_range", f"seed {seed} is outside 0-{MAX_SEED}; pick a whole number in "
                             "that range, or none for a fresh one", seed=seed, max=MAX_SEED)


def check_mode(mode: Mode, info: EngineInfo, needs: str | None = None) -> None:
    """Refuse a mode the model cannot do, saying what it can do and which model can."""
    if mode not in info.modes:
        needs = needs or mode_hint(mode)
        can = ", ".join(m.value for m in info.modes)
        raise InvalidRequest("mode_unsupported", f"{info.name} cannot do {mode.value.replace('_', '-')} synthesis "
                             f"(it can do: {can}); load {needs} for it", mode=mode.value, model=info.name,
                             needs=needs, supported=can)


def check_speaker(speaker: str | None, info: EngineInfo, needs: str, mode: Mode = Mode.SFT) -> None:
    """Refuse an unknown preset speaker, or any on a model without presets (naming the models to load for
    `mode`: `needs`)."""
    if not info.speakers:
        raise InvalidRequest("no_speakers", f"{info.name} has no preset speakers; load {needs}",
                             model=info.name, needs=needs, mode=mode.value)
    if speaker not in info.speakers:
        options = ", ".join(info.speakers)
        raise InvalidRequest("speaker_unknown", f"unknown speaker {speaker!r}; choose one of: {options}",
                             speaker=speaker or "", options=options)


def infer_mode(*, source: bool = False, voice: bool = False, transcript: bool = False,
               instruct: bool = False) -> Mode:
    """The mode a request means when it names none (API and CLI): a source recording → vc; a voice to
    clone → zero_shot with its transcript, cross_lingual without; else instruct with a style text, else sft."""
    if source:
        return Mode.VC
    if voice:
        return Mode.ZERO_SHOT if transcript else Mode.CROSS_LINGUAL
    return Mode.INSTRUCT if instruct else Mode.SFT


def check_request(request: SynthesisRequest, info: EngineInfo | None, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
                  saved_voices: tuple[str, ...] = (), needs: str | None = None,
                  instruct_example: str | None = None) -> CheckedRequest:
    """The request, checked: raise `InvalidRequest` for the first problem found, else return it as a
    `CheckedRequest` with its recordings trimmed. `info` None skips the model-specific checks (and then
    marks nothing as checked for a model). `needs` names the model to load when the mode is refused
    (default: `mode_hint`)."""
    mode = request.mode
    needs = needs or mode_hint(mode)
    instruct_example = instruct_example or (info.instruct_examples[0] if info and info.instruct_examples
                                            else DEFAULT_INSTRUCT_EXAMPLE)
    prompt, source = request.prompt_audio, request.source_audio
    if info is not None:
        check_mode(mode, info, needs)
    check_speed(request.speed)
    check_seed(request.seed)
    if request.voice_match not in VOICE_MATCH_LEVELS:
        raise InvalidRequest("bad_voice_match", f"voice_match {request.voice_match!r} is not one of "
                             f"{', '.join(VOICE_MATCH_LEVELS)}", value=request.voice_match)
    if mode is not Mode.VC:
        check_text(request.text, max_text_chars)
    check_characters(request.prompt_text, "transcript", "prompt_text")
    check_characters(request.instruct_text, "instruct text", "instruct_text")
    instruct_voice = info is not None and info.instruct_voice
    if (mode is Mode.SFT or (mode is Mode.INSTRUCT and not instruct_voice)) and info is not None:
        # Preset speakers only: a backend whose saved voices work as presets lists them in info.speakers.
        check_speaker(request.speaker, info, needs, mode)
    if mode is Mode.INSTRUCT and not request.instruct_text.replace(END_OF_PROMPT, "").strip():
        raise InvalidRequest("instruct_missing", f"describe the speaking style in the instruct text, e.g. "
                             f"\"{instruct_example}\"")
    if mode in (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC) or (mode is Mode.INSTRUCT and instruct_voice):
        if request.speaker and request.prompt_audio is None:
            if request.speaker not in saved_voices:
                raise InvalidRequest("voice_unknown", f"there is no saved voice {request.speaker!r}; saved voices: "
                                     f"{', '.join(saved_voices) or 'none'}", voice=request.speaker)
        else:
            prompt = audio_utils.check_prompt(request.prompt_audio)
            if mode is Mode.ZERO_SHOT and not request.prompt_text.strip():
                raise InvalidRequest("transcript_missing", "type the transcript of the prompt audio (exactly what "
                                     "is said in it), or use cross-lingual mode, which needs none")
    if mode is Mode.VC:
        source = audio_utils.check_prompt(request.source_audio, what="source audio", min_seconds=0.5,
                                          max_seconds=audio_utils.MAX_SOURCE_SECONDS)
    values = {f.name: getattr(request, f.name) for f in fields(SynthesisRequest)}
    return CheckedRequest(**{**values, "prompt_audio": prompt, "source_audio": source}, checked_against=info)
