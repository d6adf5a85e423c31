"""Rendering a project's lines into takes: in script order, with per-line progress, saved after every line.

Because the project is saved after each line, a render stopped by Stop, an error or a crash resumes where
it was: the next `render_project(only_missing=True)` renders only lines without an up-to-date take. Each take
goes through the bad-take guard (`serving.takes.guarded_synthesis`: bad segments are re-rendered with new
seeds) and gets its subtitle cues from the chunks (`SegmentClock`).

Nothing here imports torch: it drives the `Engine` it is given.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..audio import join_chunks
from ..engine import raise_if_cancelled, report
from ..errors import InvalidRequest
from ..serving.takes import RetryPolicy, SegmentReport, guarded_synthesis
from ..types import AudioChunk, ProgressCallback, ProgressEvent, SynthesisRequest
from ..validation import MAX_SEED
from .project import Line, Project, Take
from ..serving.subtitles import SegmentClock
from .voice_map import prepare

if TYPE_CHECKING:
    from ..engine import Engine
    from ..serving.default_voice import VoiceResolver

TextFilter = Callable[[str], str]  # e.g. a pronunciation glossary applied to each line before it is spoken


@dataclass
class RenderSummary:
    """What one `render_project` call did: the ids of the lines it rendered, and those it left as they were."""

    rendered: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def render_project(project: Project, engine: Engine, resolver: VoiceResolver | None = None,
                   policy: RetryPolicy | None = None, progress: ProgressCallback | None = None,
                   cancel: threading.Event | None = None, only_missing: bool = True,
                   text_filter: TextFilter | None = None) -> RenderSummary:
    """Render the project's lines in order ("line 3/12 · Bob": its place in the script), saving after each line.

    `only_missing` renders just the lines without an up-to-date take (see `Project.needs_render`); False
    makes a new take of every unlocked line. Every voice is checked against the model before the first line,
    so a voice it cannot use stops the render before any work. Raises `Cancelled` when `cancel` is set (what
    was rendered so far is saved).
    """
    lines = [line for line in project.lines if not line.locked and (not only_missing or project.needs_render(line))]
    chosen = {line.id for line in lines}
    summary = RenderSummary(skipped=[line.id for line in project.lines if line.id not in chosen])
    resolver = resolver or _project_resolver(project)
    for speaker in dict.fromkeys(line.speaker for line in lines):  # each voice checked once, before any work
        _request(project, next(x for x in lines if x.speaker == speaker), engine, resolver, 0, text_filter)
    total, positions = len(lines), {line.id: place for place, line in enumerate(project.lines, start=1)}
    for number, line in enumerate(lines):
        raise_if_cancelled(cancel)
        label = f"line {positions[line.id]}/{len(project.lines)} · {line.speaker}"  # its place in the script
        where = dict(line=positions[line.id], lines=len(project.lines), speaker=line.speaker)
        report(progress, "line", number / total, label, "line", **where)
        _render(project, line, engine, resolver, policy, None, _scaled(progress, number, total, label, where),
                cancel, text_filter)
        project.save()
        summary.rendered.append(line.id)
    report(progress, "line", 1.0, f"{total} line{'s' if total != 1 else ''} rendered", "lines_done", count=total)
    return summary


def render_line(project: Project, line_id: str, engine: Engine, resolver: VoiceResolver | None = None,
                policy: RetryPolicy | None = None, seed: int | None = None, progress: ProgressCallback | None = None,
                cancel: threading.Event | None = None, text_filter: TextFilter | None = None) -> Take:
    """A new take of one line (regenerate), chosen and saved. Without `seed`: the line's first take uses the
    project's derived seed, later takes a fresh seed none of its takes used. A locked line refuses."""
    line = project.line(line_id)
    if line.locked:
        raise InvalidRequest("line_locked", f"line {line_id} is locked; unlock it to render a new take",
                             line=line_id)
    resolver = resolver or _project_resolver(project)
    take = _render(project, line, engine, resolver, policy, seed, progress, cancel, text_filter)
    project.save()
    return take


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


def _request(project: Project, line: Line, engine: Engine, resolver: VoiceResolver | None, seed: int,
             text_filter: TextFilter | None = None) -> SynthesisRequest:
    """The checked request of `line` (raises `InvalidRequest` naming the speaker when its voice cannot work)."""
    choice = project.voice_for(line.speaker)
    text = text_filter(line.text) if text_filter is not None else line.text
    try:
        request = prepare(text, choice, engine, resolver, seed, project.sample_audio(line.speaker),
                          project.settings.speed)
        engine.check(request)
    except InvalidRequest as exc:
        raise InvalidRequest(exc.code, f"{line.speaker}'s voice: {exc.message}", **{**exc.params,
                             "speaker": line.speaker}) from None
    return request


def _project_resolver(project: Project) -> VoiceResolver:
    """The default-voice resolver used when the caller gives none: no saved voices, caches in the project."""
    from ..serving.default_voice import VoiceResolver

    return VoiceResolver(cache_root=project.voices_dir)


def _render(project: Project, line: Line, engine: Engine, resolver: VoiceResolver | None,
            policy: RetryPolicy | None, seed: int | None, progress: ProgressCallback | None,
            cancel: threading.Event | None, text_filter: TextFilter | None) -> Take:
    seed = next_seed(project, line) if seed is None else int(seed)
    request = _request(project, line, engine, resolver, seed, text_filter)
    clock = SegmentClock(line.speaker)
    pieces, rate, reports = [], engine.info.sample_rate, []
    for chunk in synthesize_guarded(engine, request, _policy(project, policy), progress, cancel, reports):
        clock.feed(chunk)
        pieces.append(chunk.samples)
        rate = chunk.sample_rate
    samples = join_chunks(pieces)
    if not len(samples):
        raise InvalidRequest("take_empty", f"the model made no audio for line {line.id}; edit its text or render "
                             "it again", line=line.id)
    check, attempts = _summarise(reports)
    return project.add_take(line, samples, rate, seed, clock.cues(fallback_text=line.text), check, attempts)


def synthesize_guarded(engine: Engine, request: SynthesisRequest, policy: RetryPolicy | None,
                       progress: ProgressCallback | None, cancel: threading.Event | None,
                       reports: list[SegmentReport]) -> Iterator[AudioChunk]:
    """The one place a take is synthesised: through the bad-take guard (bad segments re-rendered with new
    seeds; each segment's outcome appended to `reports`)."""
    yield from guarded_synthesis(engine, request, policy, progress, cancel, report=reports)


def _policy(project: Project, policy: RetryPolicy | None) -> RetryPolicy:
    """The caller's policy, else the project's: `retries` re-renders of a bad segment (0 switches them off)."""
    if policy is not None:
        return policy
    retries = max(0, int(project.settings.retries))
    return RetryPolicy(enabled=retries > 0, retries=retries)


def _summarise(reports: list[SegmentReport]) -> tuple[dict, int]:
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
