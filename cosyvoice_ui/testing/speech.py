"""The speech jobs of a test that holds its own engine (a studio render, a book): `serving.jobs.SpeechJobs` over
settings kept under one folder, with no model queue, as the CLI builds them."""

from __future__ import annotations

from pathlib import Path

from ..serving.default_voice import VoiceResolver
from ..serving.jobs import SpeechJobs
from ..serving.voices import VoiceLibrary
from ..settings import Settings


def speech_jobs(root: Path, library: VoiceLibrary | None = None, **settings) -> SpeechJobs:
    """Speech jobs with glossaries, voices and projects under `root`; `settings`: any other `Settings` field
    (take_retries, check_takes, blocked_words_file, default_voice, ...)."""
    root = Path(root)
    chosen = Settings(**{"voices_dir": root / "voices", "glossary_dir": root / "glossaries",
                         "projects_dir": root / "projects", **settings})
    cache = None if library is not None else chosen.voices_dir  # the built-in voice's features
    resolver = VoiceResolver(library, chosen.default_voice, cache_root=cache)
    return SpeechJobs(None, chosen, library, resolver)
