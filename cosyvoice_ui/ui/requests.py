"""Tab widget values ↔ `SynthesisRequest` (pure functions, no Gradio), shared by handlers, validators
and history re-runs."""

from __future__ import annotations

from pathlib import Path

from .. import audio as audio_utils
from ..errors import InvalidRequest
from ..types import Audio, Mode, SynthesisRequest

# Which tab field an InvalidRequest code points at (for per-widget validation messages).
FIELD_OF_CODE = {
    "transcript_missing": "prompt_text", "transcript_mismatch": "prompt_text",
    "glossary_unknown": "text",  # the chosen glossary was deleted meanwhile: it changes the text
    "text_empty": "text", "text_too_long": "text", "text_unspeakable": "text", "text_invalid": "text",
    "instruct_missing": "instruct_text",
    "speaker_unknown": "speaker", "no_speakers": "speaker", "voice_unknown": "speaker",
    "speed_out_of_range": "speed", "speed_invalid": "speed",
    # shown on the sample (its box, right below it, stays in sight to be ticked; the message is beside Generate too)
    "consent_required": "prompt",
}
AUDIO_CODES = ("prompt_missing", "prompt_too_short", "prompt_too_long", "prompt_low_rate", "prompt_silent",
               "audio_unreadable", "audio_too_short", "audio_too_many_channels", "audio_rate_unsupported",
               "audio_too_large", "asr_audio_too_long")


def prompt_from_file(path: str | None, what: str = "prompt audio",
                     limits: audio_utils.AudioLimits = audio_utils.PROMPT_LIMITS) -> Audio | None:
    """A gr.Audio(type="filepath") value → `Audio` (None when empty), decoded within the door's `limits`."""
    if not path:
        return None
    return audio_utils.read_audio(Path(path), what, limits)


def field_of(error: InvalidRequest) -> str:
    """The widget an error is about: prompt, source, prompt_text, text, instruct_text, speaker, speed or mode."""
    if error.code == "voice_unknown":
        return "saved"
    if error.code in AUDIO_CODES:
        return "source" if error.params.get("what") == "source audio" else "prompt"
    return FIELD_OF_CODE.get(error.code, "mode")


def request_from_meta(meta: dict, speed: float = 1.0, seed: int | None = 0, stream: bool = False) -> SynthesisRequest:
    """Build the request a tab (or a history entry) describes; audio fields are file paths."""
    mode = Mode.parse(meta.get("mode", "sft"))
    return SynthesisRequest(
        mode=mode,
        text=meta.get("text") or "",
        prompt_audio=prompt_from_file(meta.get("prompt")),
        prompt_text=meta.get("prompt_text") or "",
        instruct_text=meta.get("instruct_text") or "",
        speaker=meta.get("speaker") or None,
        source_audio=prompt_from_file(meta.get("source"), "source audio", audio_utils.SOURCE_LIMITS),
        speed=_number(speed, float, "speed", 1.0),
        seed=_number(seed, int, "seed", 0),
        stream=bool(stream),
        voice_match=meta.get("voice_match") or "quick",
    )


def _number(value, kind, what: str, default):
    """A widget's number (an API caller may send anything: "fast", NaN, inf) → `kind`, or a clear refusal."""
    if value is None:
        return default
    try:
        return kind(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidRequest(f"{what}_invalid", f"the {what} must be a number, not {str(value)[:40]!r}",
                             what=what) from None


def _voice(prompt, saved: str | None, consent: bool = False) -> dict:
    """A saved voice (by id) replaces the uploaded sample; a sample keeps the consent box's answer (a re-run from the
    history keeps it too)."""
    if saved:
        return {"prompt": None, "speaker": saved, "voice": saved}
    return {"prompt": prompt, "voice": "sample", "consent": bool(consent)}


def clone_meta(prompt, saved, transcript, text, voice_match: str = "quick", consent: bool = False) -> dict:
    return {"mode": "zero_shot", **_voice(prompt, saved, consent), "prompt_text": transcript, "text": text,
            "voice_match": voice_match}


def cross_meta(sub, prompt, saved, speaker, instruct, text, voice_match: str = "quick", consent: bool = False) -> dict:
    if sub == "instruct":
        if speaker:  # a preset speaker (the -Instruct models); the tab offers none where instruct takes a voice
            return {"mode": "instruct", "speaker": speaker, "instruct_text": instruct, "text": text, "voice": speaker}
        return {"mode": "instruct", **_voice(prompt, saved, consent), "instruct_text": instruct, "text": text}
    return {"mode": "cross_lingual", **_voice(prompt, saved, consent), "text": text, "voice_match": voice_match}


def sft_meta(speaker, text) -> dict:
    return {"mode": "sft", "speaker": speaker, "text": text, "voice": speaker}


def vc_meta(source, target, saved, consent: bool = False) -> dict:
    return {"mode": "vc", "source": source, **_voice(target, saved, consent)}
