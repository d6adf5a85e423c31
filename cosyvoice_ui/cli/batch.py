"""Batch synthesis for long jobs (an e-book, a list of IVR prompts): one utterance per line of a text file.

Output is numbered files (`0001.wav`, `0002.wav`, ...) in a folder, or with `--join` one file. A re-run
resumes: lines whose file already exists (non-empty) are skipped. Files are written under a temporary
name and renamed, so an interrupted run never leaves a truncated file that would be skipped later.
Every utterance is one speech job (`serving/jobs.py`, bad takes re-rendered); with `--srt`/`--vtt`
each numbered file gets its subtitles beside it, and a joined file one subtitle file whose times include the
pauses (each part's cues are kept beside it until the join). This is the CLI's helper: it writes one progress
line per utterance to stderr.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

import numpy as np

from ..engine import Engine
from ..files import atomic_path
from ..errors import InvalidRequest
from ..serving.jobs import JobOptions, SpeechJobs, render_on
from ..serving.subtitles import Cue, shift
from ..types import ProgressCallback
from .common import build_request, subtitle_targets, write_audio, write_subtitles

log = logging.getLogger(__name__)

JOIN_PAUSE_S = 0.3  # silence between utterances in a joined file (a sentence break)
BAR_WIDTH = 24


def read_lines(path: Path) -> list[str]:
    """The non-blank lines of a UTF-8 text file, stripped."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest("text_file_unreadable", f"cannot read the text file {path} ({exc}); it must be "
                             "UTF-8 text with one utterance per line", path=str(path)) from exc
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise InvalidRequest("text_empty", f"the text file {path} has no text (one utterance per line)")
    return lines


class BatchProgress:
    """One line per utterance: a bar, the count, the file, the audio length and an estimate of the time left."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.done_here = 0  # utterances synthesised in this run (skipped ones excluded, for the estimate)

    def line(self, index: int, name: str, status: str) -> None:
        filled = int(BAR_WIDTH * index / max(1, self.total))
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        self.stream.write(f"[{bar}] {index}/{self.total} {name} {status}\n")
        self.stream.flush()

    def synthesised(self, index: int, name: str, seconds: float, text: str) -> None:
        self.done_here += 1
        per_item = (time.monotonic() - self.started) / self.done_here
        left = per_item * (self.total - index)
        preview = text if len(text) <= 40 else text[:37] + "..."
        self.line(index, name, f"{seconds:.1f} s  ~{_duration(left)} left  \"{preview}\"")


def synth_text_file(engine: Engine, args, speech: SpeechJobs, options: JobOptions,
                    progress: ProgressCallback | None = None) -> int:
    """Synthesise every line of `args.text_file` into `args.out`; returns the process exit code.

    Each line is one speech job (`speech.prepare`: glossary, default voice, the one check; then `render_on`).
    Numbered files go into the folder `args.out`; with `args.join` `args.out` is the one file. A line the engine
    refuses (e.g. nothing speakable) is reported and skipped; the exit code is then 1. `progress` receives the
    bad-take guard's retry reports (one line per utterance replaces the per-stage bar).
    """
    lines = read_lines(args.text_file)
    utterance = _Utterances(engine, args, speech, options, progress)
    if args.join:
        return _joined(engine, args, lines, utterance)
    fmt = (args.format or "wav").lower()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    width = max(4, len(str(len(lines))))
    bar = BatchProgress(len(lines))
    subtitles = [fmt_ for fmt_ in ("srt", "vtt") if getattr(args, fmt_, None) is not None]
    failed, skipped = [], 0
    for index, text in enumerate(lines, 1):
        path = out_dir / f"{index:0{width}d}.{fmt}"
        if _written(path) and all(_written(path.with_suffix(f".{sub}")) for sub in subtitles):
            skipped += 1
            bar.line(index, path.name, "exists, skipped")
            continue
        try:
            samples, cues = utterance(text)
        except InvalidRequest as exc:
            failed.append(index)
            bar.line(index, path.name, f"FAILED: {exc}")
            continue
        write_audio(path, samples, engine.info.sample_rate, fmt, args.loudness)
        for sub in subtitles:
            write_subtitles(path.with_suffix(f".{sub}"), cues, sub)
        bar.synthesised(index, path.name, len(samples) / engine.info.sample_rate, text)
    written = len(lines) - skipped - len(failed)
    print(f"{out_dir}: {written} written, {skipped} already there, {len(failed)} failed"
          + (f" (lines {', '.join(map(str, failed))}; fix them and run again)" if failed else ""))
    return 1 if failed else 0


def _joined(engine: Engine, args, lines: list[str], utterance: _Utterances) -> int:
    """All lines into one file; per-line parts (audio and cues) wait in a hidden folder beside it until every
    line is done."""
    out = Path(args.out)
    targets = subtitle_targets(args, out)
    if _written(out) and all(_written(path) for _, path in targets):
        print(f"{out} exists already; delete it to synthesise again")
        return 0
    parts = out.parent / f".{out.name}.parts"
    parts.mkdir(parents=True, exist_ok=True)
    width = max(4, len(str(len(lines))))
    rate = engine.info.sample_rate
    bar = BatchProgress(len(lines))
    failed = []
    for index, text in enumerate(lines, 1):
        part = parts / f"{index:0{width}d}.npy"
        if _written(part):
            bar.line(index, part.name, "done in an earlier run, skipped")
            continue
        try:
            samples, cues = utterance(text)
        except InvalidRequest as exc:
            failed.append(index)
            bar.line(index, part.name, f"FAILED: {exc}")
            continue
        _save_cues(part, cues)  # first: a part is finished once its audio is there
        with atomic_path(part) as tmp, open(tmp, "wb") as handle:
            np.save(handle, samples.astype(np.float32))
        bar.synthesised(index, part.name, len(samples) / rate, text)
    if failed:
        print(f"{len(failed)} lines failed (lines {', '.join(map(str, failed))}); fix them and run again: the "
              f"finished lines are kept in {parts}")
        return 1
    pause = np.zeros(int(JOIN_PAUSE_S * rate), np.float32)
    pieces, cues, offset = [], [], 0
    for index, text in enumerate(lines, 1):
        part = parts / f"{index:0{width}d}.npy"
        samples = np.load(part)
        cues += shift(_load_cues(part, text, len(samples) / rate), offset / rate)
        pieces += [samples, pause]
        offset += len(samples) + len(pause)
    joined = np.concatenate(pieces[:-1])
    fmt = args.format or (out.suffix.lstrip(".").lower() or "wav")
    write_audio(out, joined, rate, fmt, args.loudness)
    for sub, path in targets:
        write_subtitles(path, cues, sub)
    shutil.rmtree(parts, ignore_errors=True)
    print(f"wrote {out} ({len(lines)} utterances, {len(joined) / rate:.1f} s at {rate} Hz)")
    for _, path in targets:
        print(f"wrote {path} ({len(cues)} cues)")
    return 0


class _Utterances:
    """One line of the file → (samples, cues): its own speech job on the loaded engine."""

    def __init__(self, engine: Engine, args, speech: SpeechJobs, options: JobOptions,
                 progress: ProgressCallback | None) -> None:
        self.engine, self.args, self.speech, self.options = engine, args, speech, options
        self.progress = _retries_only(progress)

    def __call__(self, text: str) -> tuple[np.ndarray, list[Cue]]:
        job = self.speech.prepare(build_request(self.args, text), self.options, self.engine.info)
        result = render_on(self.engine, job, self.speech.resolver, self.progress)
        return result.samples, list(result.cues)


def _retries_only(progress: ProgressCallback | None) -> ProgressCallback | None:
    """The bad-take guard's reports ("segment" events), not the per-stage bar the utterance lines replace."""
    if progress is None:
        return None
    return lambda event: progress(event) if event.stage == "segment" else None


def _save_cues(part: Path, cues: list[Cue]) -> None:
    data = [[c.start, c.end, c.text] for c in cues]
    with atomic_path(part.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def _load_cues(part: Path, text: str, seconds: float) -> list[Cue]:
    """A part's cues; a part without them (an older run) gets one cue over its whole length."""
    try:
        return [Cue(float(s), float(e), str(t)) for s, e, t in json.loads(part.with_suffix(".json").read_text("utf-8"))]
    except (OSError, ValueError, TypeError):
        return [Cue(0.0, seconds, text)]


def _written(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"

