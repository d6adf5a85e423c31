"""Consent on shared servers: cloning from a new recording needs the caller's word that its speaker agreed.

The one rule, called by the one speech job (`SpeechJobs.prepare`) and the one voice-saving path
(`SpeechJobs.save_voice`), so every surface (the UI's tabs and studio rows, REST, the Gradio API and MCP, the
CLI, scripts, books, the cluster) asks it the same way:

- it applies when the server requires consent: `--require-consent` / `--no-require-consent`, by default when the
  server is public (a non-loopback bind or `--share`, `Settings.is_public`); loopback asks nothing, as before;
- it applies to a new recording of a voice: a request's `prompt_audio` (clone, cross-lingual, instruct with a
  sample, the target voice of a voice conversion, a script's or book's sample) and a recording being saved. A
  saved voice (its consent was given when it was saved), a preset speaker and the app's own example voice do
  not need it; a voice conversion's source recording is only its words, so it does not either;
- the caller confirms with `consent` (the UI's box beside the sample, `"consent": true` in the API); without it
  the request is refused with `consent_required` (HTTP 428) before any work.

A saved voice keeps the record (`Consent.record`): that consent was given, when (UTC) and by which login or API
key id (never a secret).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..audio import audio_hash
from ..errors import InvalidRequest

if TYPE_CHECKING:
    from ..settings import Settings
    from ..types import Audio, SynthesisRequest

CODE = "consent_required"


class ConsentRequired(InvalidRequest):
    """A new recording was sent to a server that requires the speaker's consent, without it."""

    def __init__(self, what: str = "prompt audio") -> None:
        super().__init__(CODE, "this server is shared, so cloning a voice from a new recording needs its speaker's "
                         "consent: confirm that the person recorded agreed to have their voice cloned by sending "
                         "consent with the recording (\"consent\": true in JSON or a form, consent=True from "
                         "gradio_client or MCP), or use a saved voice or a preset speaker instead",
                         what=what, param="consent")


@dataclass(frozen=True)
class Consent:
    """The caller's word for one recording: given or not, and by whom (a login or API key id; None: the owner on
    loopback, or a server without logins)."""

    given: bool = False
    by: str | None = None

    def record(self) -> dict | None:
        """What a saved voice keeps: {"given": true, "at": UTC time, "by": login or key id} (None: not given)."""
        if not self.given:
            return None
        return {"given": True, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "by": self.by}


@dataclass(frozen=True)
class ConsentPolicy:
    """Whether this server requires consent, and the one check of it."""

    required: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> ConsentPolicy:
        return cls(required=consent_required(settings))

    def check_request(self, request: SynthesisRequest, given: bool) -> None:
        """Refuse (`ConsentRequired`) a request that clones from a new recording without consent, when required."""
        if self.required and not given and is_new_recording(request.prompt_audio):
            raise ConsentRequired("prompt audio")

    def check_saving(self, audio: Audio | None, given: bool) -> None:
        """Refuse saving a recording as a voice without consent, when required."""
        if self.required and not given and is_new_recording(audio):
            raise ConsentRequired("voice audio")


def consent_required(settings: Settings) -> bool:
    """The server's rule: `--require-consent` / `--no-require-consent` when given, else on when it is public."""
    explicit = getattr(settings, "require_consent", None)
    return bool(explicit) if explicit is not None else settings.is_public


def is_new_recording(audio: Audio | None) -> bool:
    """A recording that is neither absent nor the app's own example voice (shipped with it, no one's to give)."""
    return audio is not None and audio_hash(audio) != _builtin_hash()


_builtin: list[str] = []
_builtin_lock = threading.Lock()


def _builtin_hash() -> str:
    """The example voice's recording hash (read once; "" when it is not installed)."""
    with _builtin_lock:
        if not _builtin:
            from .default_voice import builtin_audio, builtin_available

            try:
                _builtin.append(audio_hash(builtin_audio()) if builtin_available() else "")
            except InvalidRequest:  # an unreadable asset: no recording is exempt
                _builtin.append("")
        return _builtin[0]
