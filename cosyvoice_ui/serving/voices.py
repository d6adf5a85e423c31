"""Saved voices on disk: a cloned voice is recorded once and reused by id (UI, REST API, CLI).

Layout, one folder per voice under `voices_dir`:

    voices_dir/<id>/voice.json                 id, name, transcript, created, sample_rate, duration_s, consent
    voices_dir/<id>/prompt.wav                 the checked, silence-trimmed prompt (float32, original rate)
    voices_dir/<id>/features-<family>.safetensors   prompt features a backend computed (its own cache)

`prompt.wav` is kept so the features can be recomputed for another model family (the CosyVoice backend's
feature cache: `cosyvoice/voice_features.py`). Using voices with the loaded model: `voice_service.py`.
Nothing here imports torch.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import re
import secrets
import shutil
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .. import audio as audio_utils
from ..errors import InvalidRequest
from ..files import is_stale, sweep_stale_temp, write_atomic
from ..ids import is_id, normal_id, slug as id_slug
from ..store_index import StoreIndex, check_room, entries_of
from ..types import Audio
from ..validation import check_characters

log = logging.getLogger(__name__)

VOICE_FILE = "voice.json"
PROMPT_FILE = "prompt.wav"
DEFAULT_FILE = "default.json"  # which saved voice speaks when a request names none
RESERVED_IDS = ("default", "builtin")  # mean the default and the built-in voice (default_voice.py)
MAX_NAME_CHARS = 100
MAX_TRANSCRIPT_CHARS = 1000
MAX_RECORD_BYTES = 64 * 1024  # voice.json holds a name (100 chars) and a transcript (1000 chars)
# A voice is written in a hidden folder and renamed into place whole; a removed one is renamed away first.
# `.staging-PID-HEX` / `.trash-PID-HEX`: a killed process's leftovers are swept by the next library.
_SCRATCH = re.compile(r"^\.(?:staging|trash)-(\d+)-[0-9a-f]{8}$")
_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)
_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


class VoiceStoreUnwritable(InvalidRequest):
    """The voices folder cannot be written (read-only or full); the voices already there are untouched."""

    def __init__(self, exc: OSError) -> None:
        if exc.errno in _READ_ONLY:
            code, message = "voice_store_read_only", ("the saved-voice store is read-only: make the voices folder "
                                                      "writable, or start the app with another --voices-dir")
        elif exc.errno in _FULL:
            code, message = "voice_store_full", ("the saved-voice store is full (no space left on the disk): free "
                                                 "some space, or start the app with another --voices-dir")
        else:
            code, message = "voice_store_unwritable", (f"the saved-voice store cannot be written "
                                                       f"({exc.strerror or 'error ' + str(exc.errno)}): check the "
                                                       "voices folder, or start the app with another --voices-dir")
        super().__init__(code, message)


@dataclass(frozen=True)
class SavedVoice:
    """The record of one saved voice (what `voice.json` holds)."""

    id: str
    name: str
    transcript: str
    created: str  # ISO 8601, UTC
    sample_rate: int
    duration_s: float
    # {"given": true, "at": UTC time, "by": login or key id} when its speaker's consent was confirmed on saving
    # (serving/consent.py); None when it was not asked (loopback, the CLI) or the voice predates it
    consent: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class VoiceNameTaken(InvalidRequest):
    """Every id made from this name is taken (HTTP 409)."""

    def __init__(self, slug: str) -> None:
        super().__init__("voice_name_taken", f"too many voices are named like {slug!r}; choose another name",
                         name=slug)


def _consent(value: object) -> dict | None:
    """A stored consent record, kept to its three fields (anything else: none)."""
    if not isinstance(value, dict) or value.get("given") is not True:
        return None
    by = value.get("by")
    return {"given": True, "at": str(value.get("at") or ""), "by": str(by) if by is not None else None}


def slugify(name: str) -> str:
    """A readable id from a display name: lower case, word characters and dashes ("My Voice!" → "my-voice")."""
    return id_slug(name, "voice")


class VoiceLibrary:
    """The saved voices in one folder: add, list, read back, remove.

    Does not compute prompt features (each backend does, in `Engine.register_voice`, and caches them in
    the voice's folder) and does not know which engine is loaded. Safe to use from several threads.
    """

    def __init__(self, voices_dir: str | Path, limit: int = 0) -> None:
        self.root = Path(voices_dir)
        self.limit = limit  # voices kept at most (0: no cap)
        self._lock = threading.Lock()
        self.index = StoreIndex(self.root, self._records, self._summary)
        self.sweep()

    def sweep(self) -> None:
        """Remove what a killed process left half-written: scratch folders and temp files of dead writers."""
        if not self.root.is_dir():
            return
        try:
            entries = list(self.root.iterdir())
        except OSError:
            return
        sweep_stale_temp(self.root)
        for entry in entries:
            match = _SCRATCH.match(entry.name)
            if match and is_stale(int(match.group(1)), entry):
                shutil.rmtree(entry, ignore_errors=True)
            elif entry.is_dir() and is_id(entry.name):
                sweep_stale_temp(entry)

    # --- reading ------------------------------------------------------------------------------------

    def _records(self):
        for entry in entries_of(self.root):
            if is_id(entry.name) and entry.is_dir():
                yield entry.name, Path(entry.path) / VOICE_FILE

    def _summary(self, voice_id: str, path: Path) -> dict | None:
        voice = self._read(voice_id, path)
        return voice.to_dict() if voice is not None else None

    def ids(self) -> tuple[str, ...]:
        """Ids of the complete voices (a folder without voice.json, e.g. an interrupted add, is ignored)."""
        return tuple(sorted(self.index.summaries()))

    def list(self) -> list[SavedVoice]:
        """Every readable voice, by id (from the index: only records that changed are read)."""
        summaries = self.index.summaries()
        return [SavedVoice(**summaries[voice_id]) for voice_id in sorted(summaries)]

    def get(self, voice_id: str) -> SavedVoice | None:
        """The voice's record, or None when there is no such (readable) voice."""
        canonical = normal_id(voice_id)
        if canonical is None:
            return None
        return self._read(canonical, self.root / canonical / VOICE_FILE)

    def _read(self, voice_id: str, path: Path) -> SavedVoice | None:
        try:
            if path.stat().st_size > MAX_RECORD_BYTES:
                log.warning("saved voice %s has an oversized record; skipped", voice_id)
                return None
            data = json.loads(path.read_text(encoding="utf-8"))
            return SavedVoice(id=voice_id, name=str(data["name"]), transcript=str(data.get("transcript", "")),
                              created=str(data["created"]), sample_rate=int(data["sample_rate"]),
                              duration_s=float(data["duration_s"]), consent=_consent(data.get("consent")))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("saved voice %s is unreadable (%s); skipped", voice_id, exc)
            return None

    def require(self, voice_id: str) -> SavedVoice:
        """Like `get`, but raise `InvalidRequest` naming the saved voices when the id is unknown."""
        voice = self.get(voice_id)
        if voice is None:
            raise InvalidRequest("voice_unknown", f"there is no saved voice {voice_id!r}; saved voices: "
                                 f"{', '.join(self.ids()) or 'none'}", voice=voice_id)
        return voice

    def path(self, voice_id: str) -> Path:
        """The voice's folder (where backends cache its features)."""
        canonical = normal_id(voice_id)
        if canonical is None:
            raise InvalidRequest("voice_unknown", f"{voice_id!r} is not a valid voice id", voice=str(voice_id))
        return self.root / canonical

    def default_id(self) -> str | None:
        """The saved voice marked as the default (None when none is, or it was deleted)."""
        try:
            voice_id = json.loads((self.root / DEFAULT_FILE).read_text(encoding="utf-8")).get("id")
        except (OSError, ValueError, AttributeError):
            return None
        return voice_id if isinstance(voice_id, str) and self.get(voice_id) is not None else None

    def set_default(self, voice_id: str | None) -> None:
        """Mark a saved voice as the default (None: back to the model's own default)."""
        try:
            if voice_id is None:
                (self.root / DEFAULT_FILE).unlink(missing_ok=True)
                return
            self.require(voice_id)
            write_atomic(self.root / DEFAULT_FILE, json.dumps({"id": voice_id}).encode())
        except OSError as exc:
            raise VoiceStoreUnwritable(exc) from exc

    def audio(self, voice_id: str) -> Audio:
        """The stored (checked and trimmed) prompt recording."""
        return audio_utils.read_audio(self.path(voice_id) / PROMPT_FILE, what=f"saved voice {voice_id}")

    # --- writing --------------------------------------------------------------------------------------

    def add(self, name: str, audio: Audio, transcript: str = "", reserved: tuple[str, ...] = (),
            consent: dict | None = None) -> SavedVoice:
        """Check and trim `audio`, store it with its transcript (and the record of its speaker's `consent`, when
        given), and return the new voice's record.

        The id comes from `name` (made unique, and never equal to one of `reserved`, e.g. preset speakers).
        Raises `InvalidRequest` for an empty name, an over-long transcript or an unusable recording.
        """
        import soundfile as sf

        name = (name or "").strip()
        transcript = (transcript or "").strip()
        if not name:
            raise InvalidRequest("voice_name_missing", "give the voice a name (e.g. \"narrator\")")
        check_characters(name, "voice name", "name")
        check_characters(transcript, "transcript", "transcript")
        if len(name) > MAX_NAME_CHARS:
            raise InvalidRequest("voice_name_too_long", f"the voice name has {len(name)} characters; the limit is "
                                 f"{MAX_NAME_CHARS}", chars=len(name), limit=MAX_NAME_CHARS)
        if len(transcript) > MAX_TRANSCRIPT_CHARS:
            raise InvalidRequest("transcript_too_long", f"the transcript has {len(transcript)} characters; the limit "
                                 f"is {MAX_TRANSCRIPT_CHARS} (a prompt is 3-30 seconds of speech)",
                                 chars=len(transcript), limit=MAX_TRANSCRIPT_CHARS)
        check_room(len(self.ids()), self.limit, "voice", "--max-voices")  # before the work; again under the lock
        trimmed = audio_utils.check_prompt(audio)
        # float32 keeps the samples exact, so features recomputed later equal the first ones.
        wav = io.BytesIO()
        sf.write(wav, trimmed.samples, trimmed.sample_rate, format="WAV", subtype="FLOAT")
        voice = SavedVoice(id="", name=name, transcript=transcript,
                           created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           sample_rate=trimmed.sample_rate, duration_s=round(trimmed.duration, 3),
                           consent=_consent(consent))
        staging = self.root / f".staging-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            staging.mkdir()
            write_atomic(staging / PROMPT_FILE, wav.getvalue())
            voice = self._claim(slugify(name), set(reserved) | set(RESERVED_IDS), staging, voice)
        except OSError as exc:
            raise VoiceStoreUnwritable(exc) from exc
        finally:  # moved into place on success; otherwise nothing half-written stays behind
            shutil.rmtree(staging, ignore_errors=True)
        log.info("saved voice %s (%.1f s, transcript %d chars)", voice.id, voice.duration_s, len(transcript))
        return voice

    def remove(self, voice_id: str) -> bool:
        """Delete a voice and its cached features. Returns False when there was no such voice."""
        voice = self.get(voice_id)
        if voice is None:
            return False
        voice_id = voice.id
        trash = self.root / f".trash-{os.getpid()}-{secrets.token_hex(4)}"
        try:  # one rename: the voice is whole or gone, never half-deleted (e.g. on a read-only store)
            os.rename(self.root / voice_id, trash)
        except OSError as exc:
            raise VoiceStoreUnwritable(exc) from exc
        shutil.rmtree(trash, ignore_errors=True)
        if self.default_id() is None:
            (self.root / DEFAULT_FILE).unlink(missing_ok=True)
        log.info("removed saved voice %s", voice_id)
        return True

    def _claim(self, slug: str, reserved: set[str], staging: Path, voice: SavedVoice) -> SavedVoice:
        """Move the written `staging` folder into place under the first free id: slug, slug-2, slug-3, ..."""
        with self._lock:
            check_room(len(self.ids()), self.limit, "voice", "--max-voices")
            for n in range(1, 10_000):
                candidate = slug if n == 1 else f"{slug[:44]}-{n}"
                if candidate in reserved or (self.root / candidate).exists():
                    continue
                voice = replace(voice, id=candidate)
                write_atomic(staging / VOICE_FILE, json.dumps(voice.to_dict(), ensure_ascii=False, indent=2).encode())
                try:
                    # Atomic, and refused onto a voice another process just saved there (never empty).
                    os.rename(staging, self.root / candidate)
                except OSError as exc:
                    if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                        continue
                    raise
                return voice
        raise VoiceNameTaken(slug)

