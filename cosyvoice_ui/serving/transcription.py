"""Prompt transcription: the service behind every "Transcribe" button, the `transcribe` command and its API route.

Zero-shot cloning needs the exact words of the sample. `Transcriber` turns a recording into text with the best
recogniser this machine has: a Whisper checkpoint the user downloaded (`pretrained_models/asr/NAME`, any of 99
languages), else pocketsphinx (English only, needs no download). Models load on first use, one job runs at a time,
and they are released after `idle_release_s` without use, like the TTS model. `check_transcript_fits` is the
family-independent check, before a clone job, that a transcript can be what the recording says.
`speaker_separation` tells the voices of several recordings apart (a dub's transcribed cues).

The backend code is `cosyvoice_ui/asr/`, imported here lazily (it loads torch/transformers/pocketsphinx).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..audio import MAX_TRANSCRIBE_SECONDS, peak_dbfs, to_mono_float
from ..errors import InvalidRequest
from ..settings import DEFAULT_MODELS_DIR
from ..types import Audio, ProgressCallback, ProgressEvent, SpeakerEmbedder

log = logging.getLogger(__name__)

POCKETSPHINX = "pocketsphinx"
# Recognisers whose transcripts are rough (pocketsphinx misses words on most samples): every door says so, and a
# clone made with an unchecked rough transcript sounds wrong.
ROUGH_BACKENDS = frozenset({POCKETSPHINX})
DOWNLOAD_HINT = "python -m cosyvoice_ui download whisper-small"
MIN_SECONDS = 0.3
MAX_SECONDS = MAX_TRANSCRIBE_SECONDS  # also where every door stops decoding a recording to transcribe
SILENT_DBFS = -50.0  # a recording whose loudest 20 ms is below this holds no speech to transcribe
LANGUAGE_NAMES = {"english": "en", "chinese": "zh", "mandarin": "zh", "cantonese": "yue", "japanese": "ja",
                  "korean": "ko", "german": "de", "french": "fr", "spanish": "es", "italian": "it",
                  "russian": "ru", "portuguese": "pt"}


@dataclass(frozen=True)
class Transcript:
    """What was heard: the text, its language code ("en", "zh", ...) and the recogniser that heard it."""

    text: str
    language: str
    backend: str

    @property
    def rough(self) -> bool:
        """True when the recogniser is a rough one (pocketsphinx): the user should check and correct the text."""
        return self.backend in ROUGH_BACKENDS


@dataclass(frozen=True)
class AsrChoice:
    """A recogniser the user can pick or download (for the model panel and `download --list`)."""

    name: str
    description: str
    size_gb: float  # 0 for pocketsphinx (installed with the app)
    ready: bool  # usable now (downloaded / installed)


def normalize_language(language: str | None) -> str | None:
    """"en", "en-US", "English" → "en"; None, "" and "auto" → None (detect)."""
    if language is None:
        return None
    value = language.strip().lower().replace("_", "-")
    if value in ("", "auto"):
        return None
    return LANGUAGE_NAMES.get(value, value.split("-")[0])


class Transcriber:
    """Speech → text with the recognisers found under `models_dir/asr` (Whisper) and pocketsphinx.

    Thread-safe: jobs run one at a time; a model loads on first use and is released when idle.
    """

    def __init__(self, models_dir: Path | None, idle_release_s: float = 300.0, device: str | None = None,
                 use_pocketsphinx: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.asr_dir = Path(models_dir or DEFAULT_MODELS_DIR) / "asr"
        self.idle_release_s = idle_release_s
        self.device = device
        self.use_pocketsphinx = use_pocketsphinx
        self._clock = clock
        self._lock = threading.RLock()
        self._loaded: dict[str, object] = {}  # backend name → recogniser
        self._last_used = clock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    # --- what is there ------------------------------------------------------------------------------

    def available(self) -> list[str]:
        """Recognisers usable now, best first: downloaded Whisper folders, then "pocketsphinx" if installed."""
        from ..asr.catalogue import find_whisper_models
        from ..asr.sphinx import sphinx_installed

        names = [p.name for p in find_whisper_models(self.asr_dir)]
        if self.use_pocketsphinx and sphinx_installed():
            names.append(POCKETSPHINX)
        return names

    def choices(self) -> list[AsrChoice]:
        """The downloadable catalogue (and any other Whisper folder found), plus pocketsphinx."""
        from ..asr.catalogue import CATALOGUE
        from ..asr.sphinx import sphinx_installed

        ready = self.available()
        found = [AsrChoice(e.name, e.description, e.size_gb, e.name in ready) for e in CATALOGUE]
        known = {e.name for e in CATALOGUE} | {POCKETSPHINX}
        found += [AsrChoice(n, "a Whisper folder you placed", 0.0, True) for n in ready if n not in known]
        if self.use_pocketsphinx:
            found.append(AsrChoice(POCKETSPHINX, "pocketsphinx: English only, offline, no download", 0.0,
                                   sphinx_installed()))
        return found

    def pick(self, language: str | None = None, backend: str | None = None) -> str:
        """The recogniser a request gets: `backend` if given and usable, else the best one for `language`."""
        names = self.available()
        language = normalize_language(language)
        if backend:
            if backend not in names:
                from ..asr.catalogue import CATALOGUE

                usable = ", ".join(names) or "none"
                hint = (f"python -m cosyvoice_ui download {backend}" if backend in {e.name for e in CATALOGUE}
                        else DOWNLOAD_HINT)
                raise InvalidRequest("asr_unknown", f"the speech recogniser {backend!r} is not available (usable "
                                     f"now: {usable}); download one with: {hint}", backend=backend)
            chosen = backend
        else:
            whisper = [n for n in names if n != POCKETSPHINX]
            if whisper:
                chosen = whisper[0]
            elif names:
                chosen = POCKETSPHINX
            else:
                raise InvalidRequest("asr_unavailable", "no speech recogniser is installed; download a Whisper "
                                     f"model: {DOWNLOAD_HINT} (about 1 GB, 99 languages), or install pocketsphinx "
                                     "for English: pip install pocketsphinx==5.1.1")
        if chosen == POCKETSPHINX and language not in (None, "en"):
            raise InvalidRequest("asr_language_unsupported", f"the offline recogniser (pocketsphinx) understands "
                                 f"only English, not {language!r}; to transcribe other languages download a "
                                 f"Whisper model: {DOWNLOAD_HINT} (about 1 GB, 99 languages)", language=language)
        return chosen

    # --- work ---------------------------------------------------------------------------------------

    def transcribe(self, audio: Audio, language: str | None = None, progress: ProgressCallback | None = None,
                   backend: str | None = None) -> Transcript:
        """The words said in `audio`. `language` (a code or name; None = detect) steers Whisper; pocketsphinx
        takes English only. Raises InvalidRequest for silent, too short or too long recordings."""
        from ..asr.signal import to_asr_rate

        samples = _checked_samples(audio)
        language = normalize_language(language)
        chosen = self.pick(language, backend)
        report = progress or (lambda event: None)
        with self._lock:
            recogniser = self._recogniser(chosen, report)
            report(ProgressEvent("transcribe", 0.5, f"transcribing {audio.duration:.1f} s with {chosen}"))
            started = time.perf_counter()
            pcm = to_asr_rate(samples, audio.sample_rate)
            if chosen == POCKETSPHINX:
                text, heard = recogniser.transcribe(pcm), "en"  # type: ignore[attr-defined]
            else:
                text, heard = recogniser.transcribe(pcm, language)  # type: ignore[attr-defined]
            self._last_used = self._clock()
            self._start_watcher()
        log.info("transcribed %.1f s with %s in %.2f s", audio.duration, chosen, time.perf_counter() - started)
        if not text.strip():
            raise InvalidRequest("asr_no_speech", "no words were recognised in the recording; check that it holds "
                                 "clear speech, or type the transcript", backend=chosen)
        report(ProgressEvent("done", 1.0, f"transcribed with {chosen}"))
        return Transcript(text.strip(), heard, chosen)

    def download(self, name: str, progress: ProgressCallback | None = None) -> Path:
        """Download (or resume) the Whisper checkpoint `name` of the catalogue; returns its folder."""
        from ..asr.catalogue import download

        return download(name, self.asr_dir, progress)

    def _recogniser(self, name: str, report: ProgressCallback) -> object:
        """The loaded recogniser `name`, loading it (and releasing any other Whisper) first."""
        if name in self._loaded:
            return self._loaded[name]
        for other in [n for n in self._loaded if n != POCKETSPHINX and name != POCKETSPHINX]:
            self._drop(other)  # one Whisper in memory at a time
        report(ProgressEvent("load", 0.0, f"loading the speech recogniser {name}"))
        if name == POCKETSPHINX:
            from ..asr.sphinx import SphinxRecognizer

            recogniser: object = SphinxRecognizer()
        else:
            from ..asr.whisper import WhisperRecognizer

            recogniser = WhisperRecognizer(self.asr_dir / name, self.device)
        self._loaded[name] = recogniser
        report(ProgressEvent("load", 1.0, f"{name} loaded"))
        return recogniser

    # --- memory -------------------------------------------------------------------------------------

    @property
    def loaded(self) -> list[str]:
        """Names of the recognisers in memory now."""
        return list(self._loaded)

    def release(self) -> bool:
        """Release every loaded recogniser now (waits for a running job). True if something was released."""
        with self._lock:
            if not self._loaded:
                return False
            for name in list(self._loaded):
                self._drop(name)
        from .memory import release_memory

        release_memory()
        return True

    def release_if_idle(self) -> bool:
        """Release the recognisers when unused for `idle_release_s` (what the idle watcher calls)."""
        with self._lock:
            if not self._loaded or self.idle_release_s <= 0:
                return False
            if self._clock() - self._last_used < self.idle_release_s:
                return False
            log.info("speech recogniser idle for %.0f s: releasing", self._clock() - self._last_used)
            return self.release()

    def close(self) -> None:
        """Stop the idle watcher and release the recognisers."""
        self._stop.set()
        self.release()

    def _drop(self, name: str) -> None:
        recogniser = self._loaded.pop(name)
        close = getattr(recogniser, "close", None)
        if close is not None:
            close()

    def _start_watcher(self) -> None:
        if self.idle_release_s <= 0 or (self._watcher is not None and self._watcher.is_alive()):
            return
        self._watcher = threading.Thread(target=self._watch, name="asr-idle-release", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        """Runs while something is loaded; exits once it is released."""
        while not self._stop.wait(min(5.0, max(0.05, self.idle_release_s / 4))):
            self.release_if_idle()
            if not self._loaded:
                return


_SHARED: dict[Path, Transcriber] = {}
_SHARED_LOCK = threading.Lock()


def shared_transcriber(models_dir: Path | None, idle_release_s: float = 300.0) -> Transcriber:
    """The process's one `Transcriber` for `models_dir`: the UI, the REST API and the CLI share its loaded
    recogniser instead of each loading a Whisper model of its own."""
    key = (Path(models_dir or DEFAULT_MODELS_DIR) / "asr").resolve()
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = Transcriber(models_dir, idle_release_s=idle_release_s)
        return _SHARED[key]


@dataclass(frozen=True)
class SpeakerSeparation:
    """How the recordings of one source (a dub's transcribed stretches) are told apart by voice
    (`asr/speakers.py`): `embed` each, then `labels` numbers the speakers in the order they first speak.
    `embedder`: the loaded model's speaker network when it lends one, else weightless voice statistics;
    `count`: how many people speak, when the user says (None: as many as the voices show)."""

    embedder: SpeakerEmbedder
    count: int | None = None

    def embed(self, audio: Audio) -> np.ndarray:
        return np.asarray(self.embedder.embed(audio), np.float32).reshape(-1)

    def labels(self, vectors: list[np.ndarray], seconds: list[float]) -> list[int]:
        from ..asr.speakers import cluster_speakers

        if not vectors:
            return []
        return cluster_speakers(np.stack(vectors), seconds, self.embedder.threshold, self.count)


def speaker_separation(engine=None, count: str | int | None = None) -> SpeakerSeparation:
    """The separation for `engine`'s speaker network (`Engine.speaker_embedder`), or voice statistics when it
    has none or no engine is given. `count`: how many people speak, 1 to `MAX_SPEAKERS` (a number or its text;
    None, "" or "auto": as many as the voices show)."""
    from ..asr.speakers import MAX_SPEAKERS, VOICE_STATISTICS_THRESHOLD, voice_statistics

    text = str(count if count is not None else "").strip().lower()
    if text in ("", "auto"):
        number = None
    elif text.isdigit() and 1 <= int(text) <= MAX_SPEAKERS:
        number = int(text)
    else:
        raise InvalidRequest("speakers_count", f"the number of speakers {text[:20]!r} is not one to tell apart; "
                             f"give how many people speak, 1 to {MAX_SPEAKERS}, or auto to let their voices say",
                             value=text[:20], max=MAX_SPEAKERS)
    lent = engine.speaker_embedder() if engine is not None else None
    if lent is None:
        lent = SpeakerEmbedder("voice statistics", voice_statistics, VOICE_STATISTICS_THRESHOLD)
    log.info("speakers are told apart by %s", lent.name)
    return SpeakerSeparation(lent, number)


def backend_for(asr_model: str | None) -> str | None:
    """`Settings.asr_model` → the `backend` argument of `Transcriber.transcribe` ("auto" or "" → None: the best
    one for the language)."""
    value = (asr_model or "").strip()
    return None if value.lower() in ("", "auto") else value


def _checked_samples(audio: Audio):
    """Mono float samples of `audio`, refusing what cannot hold a transcript."""
    if audio is None or audio.sample_rate <= 0:
        raise InvalidRequest("audio_unreadable", "no recording was given to transcribe")
    samples = to_mono_float(audio.samples)
    seconds = len(samples) / audio.sample_rate
    if seconds < MIN_SECONDS:
        raise InvalidRequest("asr_audio_too_short", f"the recording is {seconds:.1f} s long; give at least "
                             f"{MIN_SECONDS:.1f} s of speech to transcribe", seconds=f"{seconds:.1f}")
    if seconds > MAX_SECONDS:
        raise InvalidRequest("asr_audio_too_long", f"the recording is {seconds:.0f} s long; transcription takes "
                             f"at most {MAX_SECONDS:.0f} s (a voice sample needs 3-30 s)", seconds=f"{seconds:.0f}")
    if peak_dbfs(samples, audio.sample_rate) < SILENT_DBFS:
        raise InvalidRequest("asr_no_speech", "the recording is silent; record or upload the voice sample again")
    return samples


# --- does a transcript fit its recording? -----------------------------------------------------------------

# Characters per second a person says, (slow, fast), by script. The slow end is for deliberate speech with
# pauses between phrases, the fast end for quick conversational speech: Mandarin speakers say about 4-6
# characters a second, Japanese 6-9 kana-or-kanji, Korean 5-7 syllables, English about 12-15 letters (150 words
# a minute). The bands go well past those on both sides, so only a transcript that cannot be the recording's
# (a missing or extra sentence, another recording's text) is refused. Measured: the offline voice's default
# speaker says 13.0 English letters and 3.6 Mandarin characters a second (Harvard sentences, everyday Mandarin).
CHARS_PER_SECOND: dict[str, tuple[float, float]] = {
    "zh": (1.5, 10.0),  # Han characters (Chinese text)
    "ja": (2.0, 14.0),  # kana and kanji (text with kana)
    "ko": (1.5, 10.0),  # Hangul syllables
    "latin": (4.0, 25.0),  # letters and digits of alphabetic scripts (English, French, German, ...)
    "other": (2.0, 25.0),  # other letters (Cyrillic, Greek, Arabic, Devanagari, Thai, ...)
}
LONG_SLACK_S = 0.5  # the recording may be this much shorter than the fastest reading
SILENCE_SLACK_S = 2.0  # and this much longer than the slowest one (leading and trailing silence)
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]")


def character_counts(text: str) -> dict[str, int]:
    """How many spoken characters of each script band `text` has (punctuation, spaces and tags ignored)."""
    text = re.sub(r"<\|[^|>]*\|>|\[[^\]]*\]", "", text)  # <|endofprompt|>-style and [breath]-style tags
    has_kana = bool(_KANA.search(text))
    counts = dict.fromkeys(CHARS_PER_SECOND, 0)
    for ch in text:
        if _HAN.match(ch):
            counts["ja" if has_kana else "zh"] += 1
        elif _KANA.match(ch):
            counts["ja"] += 1
        elif _HANGUL.match(ch):
            counts["ko"] += 1
        elif ch.isascii() and ch.isalnum() or ("\u00c0" <= ch <= "\u024f" and ch.isalpha()):
            counts["latin"] += 1
        elif ch.isalnum():
            counts["other"] += 1
    return counts


def speaking_time(text: str) -> tuple[float, float]:
    """(fastest, slowest) seconds a person takes to say `text`, from the bands of its characters."""
    counts = character_counts(text)
    fastest = sum(n / CHARS_PER_SECOND[band][1] for band, n in counts.items())
    slowest = sum(n / CHARS_PER_SECOND[band][0] for band, n in counts.items())
    return fastest, slowest


def check_transcript_fits(transcript: str | Transcript, audio_seconds: float) -> None:
    """Raise InvalidRequest "transcript_mismatch" when `transcript` is clearly too long or too short to be
    what `audio_seconds` of recording say, and "transcript_missing" when it has no words. Any model family."""
    text = transcript.text if isinstance(transcript, Transcript) else (transcript or "")
    letters = sum(character_counts(text).values())
    if letters == 0:
        raise InvalidRequest("transcript_missing", "type the transcript of the voice sample (exactly what is said "
                             "in it), or press Transcribe")
    fastest, slowest = speaking_time(text)
    params = {"letters": str(letters), "seconds": f"{audio_seconds:.1f}", "fastest": f"{fastest:.1f}",
              "slowest": f"{slowest:.1f}"}
    if fastest > audio_seconds + LONG_SLACK_S:
        raise InvalidRequest("transcript_mismatch", f"the transcript ({letters} letters) takes at least "
                             f"{fastest:.1f} s to say, but the recording is {audio_seconds:.1f} s long: it has "
                             "more words than the recording. Type exactly what is said in it, or press Transcribe",
                             problem="too_long", **params)
    if audio_seconds > slowest + SILENCE_SLACK_S:
        raise InvalidRequest("transcript_mismatch", f"the transcript ({letters} letters) takes at most "
                             f"{slowest:.1f} s to say, but the recording is {audio_seconds:.1f} s long: words are "
                             "missing. Type exactly what is said in it, or press Transcribe",
                             problem="too_short", **params)
