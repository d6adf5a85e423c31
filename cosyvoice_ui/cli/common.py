"""What every CLI command shares: the progress line on stderr, loading the engine, the bad-take policy, the
pronunciation glossary, and writing audio and subtitle files.

Kept apart from `main.py` (the parser and dispatcher) so the command modules can use it without importing
the dispatcher. Nothing here loads torch at import time.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidRequest
from ..types import Mode, ProgressEvent

if TYPE_CHECKING:
    from ..engine import Engine
    from ..serving.glossary import Glossary, GlossaryStore
    from ..serving.subtitles import Cue
    from ..settings import Settings

# Stages whose messages say where a long job is ("line 3/12 · Bob", "chapter 2/3 · piece 5/20 · ETA 4 min",
# "cue 4/30 · Alice").
JOB_STAGES = ("line", "book", "dub")
# Words in a "segment" event's message that mark a bad-take report (a retry, its verdict): its own line.
RETRY_WORDS = ("retry", "kept the best", "not retried")
FLAGGED_WORDS = ("will retry", "not retried")  # the first report of a bad segment (counted once)


class TerminalProgress:
    """Draws one updating progress line on stderr (a terminal), or prints the lines that matter (a pipe).

    Bad-take reports (retries) and long-job positions are printed on lines of their own either way, so a
    log shows which segment was re-rendered and why, and where a script or book render got to.
    """

    def __init__(self, enabled: bool = True, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self.last = ""
        self.last_job = ""
        self.retries = 0  # bad segments reported (for the summary line of a command)

    def __call__(self, event: ProgressEvent) -> None:
        line = f"[{event.stage:>8}] {event.fraction * 100:5.1f}% {event.message}"
        if _is_retry(event):
            self.retries += any(word in event.message for word in FLAGGED_WORDS)
            label = "check" if "not retried" in event.message else "retry"
            self._own_line(f"[{label:>8}] {event.message}")
        elif event.stage in JOB_STAGES and event.message != self.last_job:
            self.last_job = event.message
            self._own_line(line)
        elif self.enabled:
            self.stream.write("\r" + line[:110].ljust(110))
            self.stream.flush()
            if event.stage in ("done",) or (event.stage in ("load", "download") and event.fraction >= 1.0):
                self.stream.write("\n")
        elif line != self.last and event.fraction in (0.0, 1.0) and event.stage not in JOB_STAGES:
            print(line, file=self.stream)
        self.last = line

    def note(self, message: str) -> None:
        """A message of the command's own (a retry the job reported by log, a resume), on its own line."""
        self._own_line(message)

    def _own_line(self, text: str) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 110 + "\r")
        print(text, file=self.stream)
        self.stream.flush()


def _is_retry(event: ProgressEvent) -> bool:
    """A report of the bad-take guard (stage "segment"), not the progress of a retry's own rendering."""
    return event.stage == "segment" and any(word in event.message for word in RETRY_WORDS)


class _RetryLog(logging.Handler):
    """Forwards the bad-take guard's retry log lines to the progress printer (for jobs that report no
    progress of their segments, like the audiobook's pieces)."""

    def __init__(self, progress: TerminalProgress) -> None:
        super().__init__(logging.INFO)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record must not stop the job
            return
        if "retry" in message:
            self.progress.retries += message.endswith("retry 1") or " retry 1:" in message
            where = self.progress.last_job.split(" · ETA")[0]
            self.progress.note(f"[   retry] {where + ': ' if where else ''}{message}")


@contextlib.contextmanager
def retries_reported(progress: TerminalProgress) -> Iterator[None]:
    """While inside, every retry the bad-take guard logs is printed by `progress` (and not logged twice)."""
    logger = logging.getLogger("cosyvoice_ui.serving.takes")
    handler = _RetryLog(progress)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def load_engine(args, progress) -> Engine:
    """The engine the flags name: a remote instance (`--engine-url`), else a local model folder (or the offline
    default voice when there is none)."""
    if getattr(args, "engine_url", None):
        from ..serving.remote import RemoteEngine
        from ..settings import env_api_keys

        key = args.api_key or next(iter(env_api_keys()), None)
        return RemoteEngine(args.engine_url, api_key=key, progress=progress)
    from ..serving.backends import open_engine
    from ..settings import LoadOptions

    options = LoadOptions(device=args.device, precision=getattr(args, "precision", "auto"),
                          voices_dir=getattr(args, "voices_dir", None))
    return open_engine(args.model_dir, Path("pretrained_models"), options, progress)


def cli_settings(args) -> Settings:
    """The settings a CLI run works under: the take flags (`--take-retries N`, `--no-take-check`; the shared
    default otherwise), the voices and glossary folders."""
    from ..settings import Settings, default_take_retries, default_watermark

    retries = getattr(args, "take_retries", None)
    retries = default_take_retries() if retries is None else int(retries)
    if retries < 0:
        raise InvalidRequest("retries_out_of_range", f"--take-retries is {retries}; pick 0 (check only) or more")
    return Settings(voices_dir=Path(getattr(args, "voices_dir", None) or "voices"),
                    glossary_dir=Path(getattr(args, "glossary_dir", None) or "glossaries"), take_retries=retries,
                    check_takes=not getattr(args, "no_take_check", False),
                    blocked_words_file=getattr(args, "blocked_words", None),
                    audit_log=getattr(args, "audit_log", None),
                    watermark=default_watermark() and not getattr(args, "no_watermark", False))


def speech_jobs(args, glossary: Glossary | None = None, loudness: float | None = None, surface: str = "cli"):
    """(the speech jobs, the options) of a CLI run: every text goes through `SpeechJobs.prepare`
    (glossary, default voice, take policy, the one check) and `render_on` like the app's requests; with
    `--audit-log`, each one's line names `surface` (cli, script, book)."""
    from ..serving.audit import Caller
    from ..serving.default_voice import VoiceResolver
    from ..serving.jobs import JobOptions, SpeechJobs
    from ..serving.voices import VoiceLibrary

    settings = cli_settings(args)
    library = VoiceLibrary(settings.voices_dir)
    speech = SpeechJobs(None, settings, library, VoiceResolver(library), glossary_store(args))
    options = JobOptions(glossary=glossary, loudness=loudness, mode_given=bool(getattr(args, "mode", None)),
                         caller=Caller(surface))
    return speech, options


def glossary_store(args) -> GlossaryStore:
    from ..serving.glossary import GlossaryStore

    return GlossaryStore(getattr(args, "glossary_dir", None) or Path("glossaries"))


def load_glossary(value: str | None, store: GlossaryStore) -> Glossary | None:
    """`--glossary FILE_OR_ID`: a JSON file when one is there (or the value ends in .json), else a saved id."""
    if not value or not str(value).strip():
        return None
    from ..serving.glossary import read_glossary_file, resolve_glossary

    path = Path(value)
    if path.is_file() or path.suffix.lower() == ".json":
        return read_glossary_file(path)
    return resolve_glossary(store, str(value))


def write_audio(path: Path, samples, rate: int, fmt: str | None, loudness: float | None) -> None:
    """Encode and write audio (format from `fmt`, else from the file's extension), written beside and renamed."""
    from ..audio import encode, normalize_loudness
    from ..files import write_atomic

    if loudness is not None:
        samples = normalize_loudness(samples, rate, loudness)
    fmt = fmt or (Path(path).suffix.lstrip(".").lower() or "wav")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(Path(path), encode(samples, rate, fmt))


def write_subtitles(path: Path, cues: list[Cue], fmt: str, speakers: bool = True) -> Path:
    """Write `cues` as an SRT or WebVTT file."""
    from ..files import write_atomic
    from ..serving.subtitles import render

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(Path(path), render(cues, fmt, speakers=speakers).encode("utf-8"))
    return Path(path)


def subtitle_targets(args, out: Path) -> list[tuple[str, Path]]:
    """(format, file) for `--srt [FILE]` and `--vtt [FILE]`; a flag without a file means beside `out`."""
    targets = []
    for fmt in ("srt", "vtt"):
        value = getattr(args, fmt, None)
        if value is None:
            continue
        targets.append((fmt, Path(value) if str(value) else Path(out).with_suffix(f".{fmt}")))
    return targets


def build_request(args, text: str):
    """The request the synth flags describe, saying `text`."""
    from ..audio import SOURCE_LIMITS, read_audio
    from ..types import SynthesisRequest
    from ..validation import infer_mode

    if args.mode:
        mode = Mode.parse(args.mode)
    else:
        mode = infer_mode(source=bool(args.source_wav), voice=bool(args.prompt_wav or args.voice),
                          transcript=bool(args.prompt_text.strip() or getattr(args, "voice_transcript", "")),
                          instruct=bool(args.instruct.strip()))
    return SynthesisRequest(
        mode=mode, text=text,
        prompt_audio=read_audio(args.prompt_wav) if args.prompt_wav else None,
        prompt_text=args.prompt_text, instruct_text=args.instruct, speaker=args.speaker,
        source_audio=read_audio(args.source_wav, "source audio", SOURCE_LIMITS) if args.source_wav else None,
        speed=args.speed, seed=args.seed, stream=args.stream, text_frontend=not args.no_text_frontend,
        voice_match=args.voice_match,
    )
