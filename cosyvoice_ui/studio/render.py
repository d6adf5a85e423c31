"""Rendering a project's lines into takes: in script order, with per-line progress, saved after every line.

Because the project is saved after each line, a render stopped by Stop, an error or a crash resumes where
it was: the next `render_project(only_missing=True)` renders only lines without an up-to-date take.

Each line is one speech job (`serving.jobs`), the same as a request from any other surface: its voice choice
becomes a request (`voice_map.prepare`), `SpeechJobs.prepare` applies the glossary, fills in the default
voice, refuses blocked words, decides the take policy and runs the one check, and `render_on` runs it on the
engine the caller holds (the bad-take guard, the segment clock, subtitles in the words the user wrote). Takes
are stored raw: the mix applies its own loudness.

Retries: the server's take policy (or the caller's `JobOptions`), capped by the project's own `retries`
setting when it has one (`line_options`).

Nothing here imports torch: it drives the `Engine` it is given.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..engine import raise_if_cancelled, report
from ..errors import InvalidRequest
from ..serving.jobs import JobOptions, Rendered, SpeechJob, render_on, request_policy
from ..serving.takes import SegmentReport
from ..types import ProgressCallback, ProgressEvent
from ..validation import MAX_SEED
from .project import Line, Project, Take
from .voice_map import prepare

if TYPE_CHECKING:
    from ..engine import Engine
    from ..serving.jobs import SpeechJobs

# Codes about a line's words rather than its speaker's voice: their errors name the line.
TEXT_CODES = ("blocked_words", "text_empty", "text_too_long", "text_invalid")


@dataclass
class RenderSummary:
    """What one `render_project` call did: the ids of the lines it rendered, and those it left as they were."""

    rendered: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def render_project(project: Project, engine: Engine, speech: SpeechJobs, options: JobOptions | None = None,
                   progress: ProgressCallback | None = None, cancel: threading.Event | None = None,
                   only_missing: bool = True) -> RenderSummary:
    """Render the project's lines in order ("line 3/12 · Bob": its place in the script), saving after each line.

    `only_missing` renders just the lines without an up-to-date take (see `Project.needs_render`); False
    makes a new take of every unlocked line. Every line is prepared (checked, blocked words refused) and every
    voice checked against the model before the first line renders, so nothing is rendered for a render that
    cannot finish. Raises `Cancelled` when `cancel` is set (what was rendered so far is saved).
    """
    lines = [line for line in project.lines if not line.locked and (not only_missing or project.needs_render(line))]
    chosen = {line.id for line in lines}
    summary = RenderSummary(skipped=[line.id for line in project.lines if line.id not in chosen])
    options = line_options(project, speech, options)
    positions = {line.id: place for place, line in enumerate(project.lines, start=1)}
    jobs = {line.id: _job(project, line, positions[line.id], engine, speech, options, next_seed(project, line))
            for line in lines}
    for speaker in dict.fromkeys(line.speaker for line in lines):  # each voice checked on the model once
        _check_on(engine, speech, jobs[next(x.id for x in lines if x.speaker == speaker)], speaker)
    total = len(lines)
    for number, line in enumerate(lines):
        raise_if_cancelled(cancel)
        label = f"line {positions[line.id]}/{len(project.lines)} · {line.speaker}"  # its place in the script
        where = dict(line=positions[line.id], lines=len(project.lines), speaker=line.speaker)
        report(progress, "line", number / total, label, "line", **where)
        _render(project, line, engine, speech, jobs[line.id], _scaled(progress, number, total, label, where), cancel)
        project.save()
        summary.rendered.append(line.id)
    report(progress, "line", 1.0, f"{total} line{'s' if total != 1 else ''} rendered", "lines_done", count=total)
    return summary


def render_line(project: Project, line_id: str, engine: Engine, speech: SpeechJobs, options: JobOptions | None = None,
                seed: int | None = None, progress: ProgressCallback | None = None,
                cancel: threading.Event | None = None) -> Take:
    """A new take of one line (regenerate), chosen and saved. Without `seed`: the line's first take uses the
    project's derived seed, later takes a fresh seed none of its takes used. A locked line refuses."""
    line = project.line(line_id)
    if line.locked:
        raise InvalidRequest("line_locked", f"line {line_id} is locked; unlock it to render a new take",
                             line=line_id)
    position = next(place for place, x in enumerate(project.lines, start=1) if x.id == line.id)
    seed = next_seed(project, line) if seed is None else int(seed)
    job = _job(project, line, position, engine, speech, line_options(project, speech, options), seed)
    _check_on(engine, speech, job, line.speaker)
    take = _render(project, line, engine, speech, job, progress, cancel)
    project.save()
    return take


def line_options(project: Project, speech: SpeechJobs, options: JobOptions | None) -> JobOptions:
    """The job options of the project's lines: the caller's glossary (resolved once, so an unknown one is
    refused before any work) and take switch; retries are the caller's or the server's number, never more
    than the project's own `retries` when it sets one (the author may ask for fewer, not for more than the
    server allows); takes are kept raw (no loudness)."""
    options = options or JobOptions()
    glossary = speech.glossary(options.glossary)
    policy = request_policy(speech.settings, options.take_retries, options.check_takes)
    own = project.settings.retries
    retries = options.take_retries if policy is None or own is None else min(policy.retries, int(own))
    return replace(options, glossary=glossary, take_retries=retries, loudness=None)


def first_seed(project: Project, line: Line) -> int:
    """The seed of a line's first take: fixed by the project's seed and the line's id (reproducible)."""
    digest = hashlib.sha256(f"{project.settings.seed}:{line.id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % (MAX_SEED + 1)


def next_seed(project: Project, line: Line) -> int:
    if not line.takes:
        return first_seed(project, line)
    used = {take.seed for take in line.takes}
    while True:
        seed = secrets.randbits(31)
        if seed not in used:
            return seed


def _job(project: Project, line: Line, position: int, engine: Engine, speech: SpeechJobs, options: JobOptions,
         seed: int) -> SpeechJob:
    """The checked job of `line` (an `InvalidRequest` names the speaker's voice, or the line for its words)."""
    try:
        return prepare(line.text, project.voice_for(line.speaker), engine.info, speech, options, seed,
                       project.sample_audio(line.speaker), project.settings.speed)
    except InvalidRequest as exc:
        raise _named(exc, line.speaker, position) from None


def _check_on(engine: Engine, speech: SpeechJobs, job: SpeechJob, speaker: str) -> None:
    """What only the loaded model can say about a voice (its voice registered first), before any work."""
    try:
        speech.resolver.ensure(engine, job.voice)
        engine.check(job.request)
    except InvalidRequest as exc:
        raise _named(exc, speaker) from None


def _named(exc: InvalidRequest, speaker: str, position: int | None = None) -> InvalidRequest:
    """`exc` naming who speaks: "Bob's voice: ..." (or "line 3 (Bob): ..." when the line's words are at fault)."""
    if exc.code in TEXT_CODES and position is not None:
        return InvalidRequest(exc.code, f"line {position} ({speaker}): {exc.message}",
                              **{**exc.params, "speaker": speaker, "line": position})
    return InvalidRequest(exc.code, f"{speaker}'s voice: {exc.message}", **{**exc.params, "speaker": speaker})


def _render(project: Project, line: Line, engine: Engine, speech: SpeechJobs, job: SpeechJob,
            progress: ProgressCallback | None, cancel: threading.Event | None) -> Take:
    rendered = render_on(engine, job, speech.resolver, progress, cancel)
    if not len(rendered.samples):
        raise InvalidRequest("take_empty", f"the model made no audio for line {line.id}; edit its text or render "
                             "it again", line=line.id)
    check, attempts = _summarise(rendered.takes)
    return project.add_take(line, rendered.samples, rendered.sample_rate, rendered.seed, take_cues(rendered, line),
                            check, attempts)


def take_cues(rendered: Rendered, line: Line) -> list:
    """The take's cues, each labelled with the line's speaker (the mix's subtitles show who speaks)."""
    return [replace(cue, speaker=line.speaker) for cue in rendered.cues]


def _summarise(reports: tuple[SegmentReport, ...]) -> tuple[dict, int]:
    """The take's check (all segments' verdicts) and its attempts (the most any segment needed)."""
    if not reports:
        return {}, 1
    segments = [r.as_dict() for r in reports]
    reasons = sorted({reason for r in reports for reason in r.check.reasons})
    return ({"ok": all(r.check.ok for r in reports), "reasons": reasons, "segments": segments},
            max(r.attempts for r in reports))


def _scaled(progress: ProgressCallback | None, number: int, total: int, label: str,
            where: dict) -> ProgressCallback | None:
    """The engine's progress of line `number` as a share of the whole render: a "line" event (`where`: its place
    and speaker) carrying the engine's own event as `then`."""
    if progress is None:
        return None

    def forward(event: ProgressEvent) -> None:
        if event.stage == "done":
            return
        message = f"{label}: {event.message}" if event.message else label
        inner = {"stage": event.stage, "code": event.code, "params": dict(event.params), "message": event.message}
        progress(ProgressEvent(event.stage, (number + event.fraction) / total, message, "line",
                               {**where, "then": inner}))

    return forward
