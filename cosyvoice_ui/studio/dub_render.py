"""Rendering a dubbing project's cues and exporting the dub.

`render_dub` renders every cue without a finished take, in time order, as one speech job each (`serving.jobs`,
through `voice_map.prepare`: glossary, default voice, consent, blocked words, take policy, the one check; then
`render_on` on the engine the caller holds), saving the project after each cue: a stopped job resumes with the
cues it did not finish. Every cue is prepared and every voice checked on the model before the first renders.

`export` fits each chosen take to its cue (`dub_cues.fit`), writes the speech track and one stem per speaker a
block at a time (memory does not grow with the video's length), the adjusted subtitles (the times actually
spoken), and the video with the dub as its first audio track and the original as its second (`dub_media.remux`).

Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..audio import DEFAULT_LUFS, encode, normalize_loudness
from ..engine import raise_if_cancelled, report
from ..errors import InvalidRequest
from ..files import atomic_path, write_atomic
from ..serving.jobs import JobOptions, SpeechJob, render_on
from ..serving.subtitles import Cue, render
from ..types import ProgressCallback, ProgressEvent
from ..validation import MAX_SEED
from .dub import DubProject
from .dub_cues import DubCue, Fit, FitPolicy, cue_policy, fit
from .dub_media import remux, stretch
from .mixdown import stem_names
from .render import TEXT_CODES
from .voice_map import prepare

if TYPE_CHECKING:
    from ..engine import Engine
    from ..serving.jobs import SpeechJobs

BLOCK_S = 30.0  # the tracks are written this many seconds at a time
FADE_S = 0.03  # the fade-out of a flagged take cut at its room's end


# --- rendering ------------------------------------------------------------------------------------------------

def render_dub(project: DubProject, engine: Engine, speech: SpeechJobs, options: JobOptions | None = None,
               progress: ProgressCallback | None = None, cancel: threading.Event | None = None) -> list[str]:
    """Render the cues without a finished take (`DubProject.needs_render`), saving after each; returns their ids.
    Raises `Cancelled` when `cancel` is set (what was rendered is kept)."""
    info = engine.info
    todo = [cue for cue in project.cues if project.needs_render(cue, info)]
    options = replace(options or JobOptions(), loudness=None)  # takes are kept raw; the export levels them
    numbers = {cue.id: number for number, cue in enumerate(project.cues, start=1)}
    jobs = {cue.id: _job(project, cue, numbers[cue.id], engine, speech, options, _first_seed(project, cue))
            for cue in todo}
    project.save()  # the voices cut from the source are kept for the next run
    for speaker in dict.fromkeys(cue.speaker for cue in todo):  # each voice checked on the model once
        job = jobs[next(cue.id for cue in todo if cue.speaker == speaker)]
        try:
            speech.resolver.ensure(engine, job.voice)
            engine.check(job.request)
        except InvalidRequest as exc:
            raise InvalidRequest(exc.code, f"{speaker}'s voice: {exc.message}", **{**exc.params,
                                                                                  "speaker": speaker}) from None
    total = len(todo)
    for done, cue in enumerate(todo):
        raise_if_cancelled(cancel)
        label = f"cue {numbers[cue.id]}/{len(project.cues)} · {cue.speaker}"
        where = dict(cue=numbers[cue.id], cues=len(project.cues), speaker=cue.speaker)
        report(progress, "dub", done / total, label, "dub_cue", **where)
        _render(project, cue, engine, speech, jobs[cue.id], _scaled(progress, done, total, label, where), cancel)
        project.save()
    report(progress, "dub", 1.0, f"{total} cue{'s' if total != 1 else ''} rendered", "dub_done", count=total)
    return [cue.id for cue in todo]


def render_cue(project: DubProject, cue_id: str, engine: Engine, speech: SpeechJobs,
               options: JobOptions | None = None, seed: int | None = None, progress: ProgressCallback | None = None,
               cancel: threading.Event | None = None) -> None:
    """A new take of one cue (regenerate), chosen and saved; a locked cue refuses."""
    cue = project.cue(cue_id)
    number = project.cues.index(cue) + 1
    if cue.locked:
        raise InvalidRequest("cue_locked", f"cue {number} is locked; unlock it to render a new take", cue=number)
    used = {take.seed for take in cue.takes}
    if seed is None:
        seed = _first_seed(project, cue) if not used else next(s for s in iter(lambda: secrets.randbits(31), None)
                                                                if s not in used)
    job = _job(project, cue, number, engine, speech, replace(options or JobOptions(), loudness=None), int(seed))
    speech.resolver.ensure(engine, job.voice)
    _render(project, cue, engine, speech, job, progress, cancel)
    project.save()


def _first_seed(project: DubProject, cue: DubCue) -> int:
    digest = hashlib.sha256(f"{project.settings.seed}:{cue.id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % (MAX_SEED + 1)


def _job(project: DubProject, cue: DubCue, number: int, engine: Engine, speech: SpeechJobs, options: JobOptions,
         seed: int) -> SpeechJob:
    try:
        choice, sample = project.voice_of(cue)
        return prepare(cue.text, choice, engine.info, speech, options, seed, sample)
    except InvalidRequest as exc:
        where = f"cue {number} ({cue.speaker})" if exc.code in TEXT_CODES else f"{cue.speaker}'s voice"
        raise InvalidRequest(exc.code, f"{where}: {exc.message}", **{**exc.params, "speaker": cue.speaker,
                                                                    "cue": number}) from None


def _render(project: DubProject, cue: DubCue, engine: Engine, speech: SpeechJobs, job: SpeechJob,
            progress: ProgressCallback | None, cancel: threading.Event | None) -> None:
    rendered = render_on(engine, job, speech.resolver, progress, cancel)
    if not len(rendered.samples):
        place = project.cues.index(cue) + 1
        raise InvalidRequest("take_empty", f"the model made no audio for cue {place}; edit its text or render it "
                             "again", cue=place)
    check = {"ok": all(r.check.ok for r in rendered.takes)} if rendered.takes else {}
    project.add_take(cue, rendered.samples, rendered.sample_rate, rendered.seed, project.take_key(cue, engine.info),
                     check)


def _scaled(progress: ProgressCallback | None, done: int, total: int, label: str,
            where: dict) -> ProgressCallback | None:
    if progress is None:
        return None

    def forward(event: ProgressEvent) -> None:
        if event.stage == "done":
            return
        inner = {"stage": event.stage, "code": event.code, "params": dict(event.params), "message": event.message}
        progress(ProgressEvent("dub", (done + event.fraction) / total,
                               f"{label}: {event.message}" if event.message else label, "dub_cue",
                               {**where, "then": inner}))

    return forward


# --- the export -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Placed:
    """A chosen take on the dub's time line: its cue, where it starts, how it was fitted and by which policy (the
    project's, or the cue's own over it)."""

    cue: DubCue
    number: int
    start: float
    fit: Fit
    file: Path  # the fitted audio
    policy: FitPolicy = FitPolicy()


@dataclass
class DubResult:
    """What `export` wrote, and how each cue was fitted (`placed`; `flagged`: those with an overrun)."""

    placed: list[Placed]
    rate: int
    seconds: float
    files: list[Path] = field(default_factory=list)

    @property
    def flagged(self) -> list[Placed]:
        return [p for p in self.placed if p.fit.flagged]

    @property
    def cues(self) -> list[Cue]:
        """The adjusted subtitles: each cue's words at the times they are actually spoken."""
        return [Cue(p.start, p.start + p.fit.placed, p.cue.text, p.cue.speaker) for p in self.placed]


def layout(project: DubProject, loudness: float | None = DEFAULT_LUFS) -> tuple[list[Placed], int]:
    """Every chosen take fitted to its cue (the fitted audio cached in `fitted/`: stretched, and cut at its room's
    end when flagged), and the rate of the dub. Refused while a cue has no take."""
    missing = [number for number, cue in enumerate(project.cues, start=1) if cue.take is None]
    if missing:
        raise InvalidRequest("dub_cues_missing", f"{len(missing)} cue(s) have no take yet (first: cue {missing[0]}); "
                             "render the project before exporting it", count=len(missing), cue=missing[0])
    placed, rate = [], None
    for number, cue in enumerate(project.cues, start=1):
        take = cue.take
        following = project.cues[number] if number < len(project.cues) else None
        room = (following.start if following is not None else project.duration) - cue.start
        policy = cue_policy(project.settings.policy, cue.fit)
        fitted = fit(take.seconds, cue.seconds, room, policy)
        path = project.fitted_dir / f"{cue.id}_{take.number:03d}_{fitted.speed:.4f}_{fitted.placed:.3f}.flac"
        audio = None
        if not path.is_file():
            audio = project.take_audio(take)
            samples = audio.samples
            if loudness is not None and len(samples):
                samples = normalize_loudness(samples, audio.sample_rate, loudness)
            samples = _cut(stretch(samples, audio.sample_rate, fitted.speed), audio.sample_rate, fitted)
            project.fitted_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(path, encode(samples, audio.sample_rate, "flac"))
        import soundfile as sf

        info = sf.info(str(path))
        rate = rate or info.samplerate
        if info.samplerate != rate:
            raise InvalidRequest("dub_rates_differ", "the takes were made by models of different sample rates; "
                                 "render every cue again with one model", cue=number)
        fitted = replace(fitted, seconds=info.frames / rate + fitted.overrun)  # the file holds what is heard
        placed.append(Placed(cue, number, cue.start, fitted, path, policy))
    return placed, int(rate)


def _cut(samples: np.ndarray, rate: int, fitted: Fit) -> np.ndarray:
    """A flagged take cut where its room ends, faded out over `FADE_S` (a take that fits is left whole)."""
    if not fitted.flagged:
        return samples
    keep = max(0, int(round(fitted.placed * rate)))
    out = np.array(samples[:keep], np.float32)
    fade = min(len(out), int(FADE_S * rate))
    if fade:
        out[-fade:] *= np.linspace(1.0, 0.0, fade, dtype=np.float32)
    return out


def export(project: DubProject, out: Path | None = None, srt: Path | None = None, vtt: Path | None = None,
           stems_dir: Path | None = None, track: Path | None = None) -> DubResult:
    """Fit the takes and write the dub: the speech track (`track`, default `exports/dub.wav`), the remuxed media
    (`out`, when given), the adjusted subtitles (`srt`, `vtt`) and the stems (`stems_dir`)."""
    placed, rate = layout(project)
    for piece in placed:
        piece.cue.fit_result = {"speed": round(piece.fit.speed, 4), "seconds": round(piece.fit.placed, 3),
                                "overflow": round(piece.fit.overflow, 3), "overrun": round(piece.fit.overrun, 3)}
    project.save()
    end = max([project.duration] + [p.start + p.fit.placed for p in placed])
    result = DubResult(placed, rate, end)
    track = Path(track) if track is not None else project.folder / "exports" / "dub.wav"
    tracks = {None: track}
    if stems_dir is not None:
        names = stem_names(project.speakers())
        tracks.update({speaker: Path(stems_dir) / f"{name}.wav" for speaker, name in names.items()})
    write_tracks(placed, rate, int(round(end * rate)), tracks)
    result.files += list(tracks.values())
    for fmt, path in (("srt", srt), ("vtt", vtt)):
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            write_atomic(Path(path), render(result.cues, fmt, speakers=True).encode("utf-8"))
            result.files.append(Path(path))
    if out is not None:
        spans = [(p.start, p.start + p.fit.placed) for p in placed]
        remux(project.media_path, track, Path(out), spans, project.settings.original, project.settings.duck_db,
              project.settings.target_lang, project.settings.source_lang)
        result.files.append(Path(out))
    return result


def write_tracks(placed: list[Placed], rate: int, length: int, tracks: dict[str | None, Path]) -> None:
    """Write WAV tracks of `length` samples a block at a time: the key None gets every take, a speaker's key only
    theirs (a stem). Stems add up to the track."""
    import soundfile as sf

    block = int(BLOCK_S * rate)
    ordered = sorted(placed, key=lambda p: p.start)
    with _Writers(tracks, rate) as writers:
        for begin in range(0, max(length, 1), block):
            stop = min(length, begin + block)
            buffers = {key: np.zeros(stop - begin, np.float32) for key in tracks}
            for piece in ordered:
                first = int(round(piece.start * rate))
                last = first + int(round(piece.fit.placed * rate))
                if first >= stop:
                    break
                if last <= begin:
                    continue
                lo, hi = max(begin, first), min(stop, last)
                samples, _ = sf.read(str(piece.file), start=lo - first, stop=hi - first, dtype="float32")
                for key in (None, piece.cue.speaker):
                    if key in buffers:
                        buffers[key][lo - begin:lo - begin + len(samples)] += samples
            for key, writer in writers.items():
                writer.write(np.clip(buffers[key], -1.0, 1.0))


class _Writers:
    """One open WAV writer per track, each written beside its file and renamed over it at the end."""

    def __init__(self, tracks: dict[str | None, Path], rate: int) -> None:
        self.tracks = tracks
        self.rate = rate
        self.contexts = {}
        self.files = {}

    def __enter__(self) -> dict:
        import soundfile as sf

        for key, path in self.tracks.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            context = atomic_path(Path(path))
            tmp = context.__enter__()
            self.contexts[key] = context
            self.files[key] = sf.SoundFile(str(tmp), "w", self.rate, 1, "PCM_16", format="WAV")
        return self.files

    def __exit__(self, kind, value, trace) -> None:
        for key, handle in self.files.items():
            handle.close()
            self.contexts[key].__exit__(kind, value, trace)
