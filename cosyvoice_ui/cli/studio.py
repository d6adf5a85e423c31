"""`synth --script` and `synth --book`: long jobs that survive an interrupt.

A script is read like the Script tab's upload (`studio.workspace.read_script_file`), rendered into a project
folder (`studio.project`: script, voice map, takes, seeds) by `studio.render.render_project`, saved after every
line, then mixed into `--out` with optional stems and subtitles (`studio.mixdown`). A book is read into chapters
(`studio.book`) and rendered piece by piece by `studio.audiobook.BookJob` into the `--out` folder, as the
Audiobook tab's jobs are. Every line and piece is one speech job (`serving.jobs`, built by `common.speech_jobs`:
glossary, default voice, `--blocked-words`, take policy, the one check), as on every other surface. Rerunning
the same command continues either job: what is finished is kept and said so. Ctrl-C stops cleanly (exit 130)
and prints how to resume.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidRequest
from .common import (TerminalProgress, glossary_store, load_engine, load_glossary, retries_reported, speech_jobs,
                     subtitle_targets, write_audio, write_subtitles)

if TYPE_CHECKING:
    from ..studio.project import Project
    from ..studio.voice_map import VoiceChoice
    from ..types import Audio, EngineInfo

# The short forms a --voices file may use for one name, besides the full {"kind": ..., "value": ...} form.
SHORT_KEYS = ("sample", "saved", "preset", "voice")
EXTRA_KEYS = ("transcript", "instruct")


# --- scripts ---------------------------------------------------------------------------------------------------

def synth_script(args) -> int:
    """Render `args.script` into its project (resuming it), then write the mix, stems and subtitles."""
    from ..audio import check_format
    from ..studio.render import render_project
    from ..studio.script import parse_script
    from ..studio.workspace import read_script_file

    out = Path(args.out)
    fmt = check_format(args.format or (out.suffix.lstrip(".") or "wav"))
    script = read_script_file(args.script)
    parse_script(script)  # an empty script is refused before the model loads
    folder = Path(args.project) if args.project else out.with_suffix(".project")
    voice_map = read_json(args.voices, "voice map") if args.voices else None  # a typo stops before the model loads
    glossary = load_glossary(args.glossary, glossary_store(args))
    # bad take or blocked-words flags stop before the model
    speech, options = speech_jobs(args, glossary, surface="script")
    progress = TerminalProgress()
    engine = load_engine(args, progress)
    project = open_project(folder, out.stem, script, args, fmt, progress)
    if voice_map is not None:
        for name, (choice, sample) in read_voice_map(args.voices, engine.info, speech.library.ids(),
                                                     voice_map).items():
            if name not in project.speakers():
                progress.note(f"note: the voice map names {name!r}, who speaks no line of this script; skipped")
                continue
            project.set_voice(name, choice, sample)
    project.save()
    total = len(project.lines)
    todo = sum(1 for line in project.lines if project.needs_render(line))
    if todo < total:
        progress.note(f"resuming {folder}: {total - todo} of {total} lines are rendered already; "
                      + (f"rendering the other {todo}" if todo else "nothing left to render"))
    try:
        render_project(project, engine, speech, options, progress)
    except KeyboardInterrupt:
        done = _rendered_lines(folder)
        print(f"interrupted: {done} of {total} lines are rendered and saved in the project {folder}; run the same "
              "command again to render the rest", file=sys.stderr)
        return 130
    return _export_script(project, args, out, fmt, folder, progress)


def _export_script(project: Project, args, out: Path, fmt: str, folder: Path, progress: TerminalProgress) -> int:
    import numpy as np

    from ..studio.mixdown import mix, stem_names, stems

    samples, rate, cues = mix(project)
    gain = 1.0
    if args.loudness is not None:  # one gain for the mix and its stems, so the stems still add up to the mix
        from ..audio import normalize_loudness

        scaled = normalize_loudness(samples, rate, args.loudness)
        energy = float(np.dot(samples, samples))
        gain = float(np.dot(scaled, samples)) / energy if energy else 1.0
    write_audio(out, samples * gain, rate, fmt, None)
    print(f"wrote {out} ({len(project.lines)} lines, {len(samples) / rate:.2f} s at {rate} Hz; project {folder})")
    if args.stems:
        tracks = stems(project)
        for speaker, name in stem_names(list(tracks)).items():
            path = Path(args.stems) / f"{name}.{fmt}"
            write_audio(path, tracks[speaker] * gain, rate, fmt, None)
            print(f"wrote {path} (stem of {speaker})")
    for sub, path in subtitle_targets(args, out):
        write_subtitles(path, cues, sub, speakers=True)
        print(f"wrote {path} ({len(cues)} cues)")
    if progress.retries:
        progress.note(f"{progress.retries} bad take(s) found (see the [retry] lines above)")
    return 0


def open_project(folder: Path, name: str, script: str, args, fmt: str, progress: TerminalProgress) -> Project:
    """The project in `folder` with `script` (reopened, its unchanged lines keeping their takes), else a new one."""
    from ..studio.project import PROJECT_FILE, Project, Settings
    from ..studio.workspace import update_script

    if (folder / PROJECT_FILE).is_file():
        project = Project.open(folder)
        changed = project.script != script
        new = update_script(project, script)
        if changed:
            progress.note(f"the script changed since the last run: {new} line(s) are new or edited")
    else:
        settings = Settings(format=fmt, seed=1 if args.seed is None else args.seed, speed=args.speed)
        project = Project.create(folder, name, script, settings)
    if args.gap is not None:
        project.settings = replace(project.settings, gap_s=args.gap)
    return project


def _rendered_lines(folder: Path) -> int:
    """Lines with an up-to-date take in the project as saved on disk (what a rerun keeps)."""
    from ..studio.project import Project

    try:
        project = Project.open(folder)
    except InvalidRequest:
        return 0
    return sum(1 for line in project.lines if not project.needs_render(line))


def read_voice_map(path: Path, info: EngineInfo, saved: tuple[str, ...],
                   data: object = None) -> dict[str, tuple[VoiceChoice, Audio | None]]:
    """`--voices FILE`: name → (voice, sample recording or None). Sample files are found beside the map file;
    `data` is the file's JSON when the caller read it already.

    Each value is a preset or saved voice name ("default", "preset:NAME", "saved:ID" too), or an object:
    {"sample": "bob.wav", "transcript": "..."}, {"saved": "id"}, {"preset": "name"}, {"voice": "name"},
    {"instruct": "..."} (the default voice with a style), or the project's own {"kind": ..., "value": ...} form.
    """
    from ..audio import read_audio
    from ..studio.voice_map import parse_voice_map

    if data is None:
        data = read_json(path, "voice map")
    if not isinstance(data, dict):
        parse_voice_map(data)  # raises the module's message about the expected shape
    normalised, samples = {}, {}
    for name, value in data.items():
        if isinstance(value, dict):
            value = _full_form(str(name), value, info, saved)
            if value.get("kind") == "sample":
                sample_path = _beside(path, str(value.get("value") or ""))
                if not sample_path.is_file():
                    raise InvalidRequest("voice_sample_missing", f"the sample recording of {name} "
                                         f"({sample_path.name!r}) is not there; put it beside the voice map or give "
                                         "its path", speaker=str(name))
                samples[str(name).strip()] = read_audio(sample_path, "sample recording")
                value = {**value, "value": sample_path.name}
        normalised[name] = value
    choices = parse_voice_map(normalised, info, saved)
    return {name: (choice, samples.get(name)) for name, choice in choices.items()}


def _full_form(name: str, value: dict, info: EngineInfo, saved: tuple[str, ...]) -> dict:
    """A short voice object → the {"kind", "value", "transcript", "instruct"} form `parse_voice_map` reads."""
    from ..studio.voice_map import choice_from_name

    if "kind" in value:
        return value
    unknown = sorted(set(value) - set(SHORT_KEYS) - set(EXTRA_KEYS))
    given = [key for key in SHORT_KEYS if key in value]
    if unknown or len(given) > 1:
        raise InvalidRequest("voice_map_invalid", f"the voice of {name}: use one of {', '.join(SHORT_KEYS)} (with "
                             f"optional {' and '.join(EXTRA_KEYS)}), not {', '.join(unknown or given)}", speaker=name)
    extra = {key: str(value.get(key) or "") for key in EXTRA_KEYS}
    if not given:
        return {"kind": "default", **extra}
    key = given[0]
    text = str(value[key] or "").strip()
    if key == "voice":
        try:
            choice = choice_from_name(text, info, saved)
        except InvalidRequest as exc:
            raise InvalidRequest(exc.code, f"the voice of {name}: {exc.message}", **exc.params) from None
        return {"kind": choice.kind, "value": choice.value, **extra}
    return {"kind": key, "value": text, **extra}


def _beside(anchor: Path, file: str) -> Path:
    path = Path(file)
    return path if path.is_absolute() or path.is_file() else Path(anchor).parent / path


def read_json(path: Path, what: str) -> object:
    try:
        return json.loads(read_text(path, what))
    except ValueError as exc:
        raise InvalidRequest("voice_map_invalid", f"the {what} {Path(path).name} is not valid JSON ({exc}); write "
                             "it as {\"Alice\": \"default\", \"Bob\": {\"sample\": \"bob.wav\"}}") from None


def read_text(path: Path, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else (exc.strerror or "unreadable")
        raise InvalidRequest("file_unreadable", f"cannot read the {what} {Path(path).name!r} ({reason}); check the "
                             "path and save it as UTF-8 text", file=Path(path).name) from None


# --- books -----------------------------------------------------------------------------------------------------

def synth_book(args) -> int:
    """Read `args.book` aloud into the folder `args.out`: chapter files + SRTs and one chaptered M4B/MP3."""
    from ..studio.audiobook import BookJob, BookSettings
    from ..studio.book import read_book

    book = read_book(args.book)
    settings = BookSettings(book_format=args.book_format, chapter_format=(args.format or "flac").lower(),
                            speed=args.speed, seed=1986 if args.seed is None else args.seed).checked()
    out_dir = Path(args.out)
    if out_dir.is_file():
        raise InvalidRequest("flags_conflict", f"--out {out_dir.name} is a file; with --book it is the folder the "
                             "chapters and the book are written to")
    glossary = load_glossary(args.glossary, glossary_store(args))
    # bad take or blocked-words flags stop before the model
    speech, options = speech_jobs(args, glossary, surface="book")
    progress = TerminalProgress()
    engine = load_engine(args, progress)
    choice, sample = book_voice(args, engine.info, speech.library.ids())
    job = BookJob(out_dir, book, choice, settings, sample)
    total = len(job.pieces())
    finished = len(job.finished(engine.info.name, glossary))
    if finished:
        progress.note(f"resuming {out_dir}: {finished} of {total} pieces are rendered already; "
                      f"rendering the other {total - finished}")
    try:
        with retries_reported(progress):
            result = job.run(engine, speech, options, progress)
    except KeyboardInterrupt:
        done = len(job.finished(engine.info.name, glossary))
        print(f"interrupted: {done} of {total} pieces are saved in {out_dir}; run the same command again to "
              "continue", file=sys.stderr)
        return 130
    for note in result.notes:
        progress.note(note)
    for audio, subtitles in zip(result.chapter_files, result.subtitle_files):
        print(f"wrote {audio}")
        print(f"wrote {subtitles}")
    print(f"wrote {result.book_file} ({len(result.chapters)} chapters, {result.seconds / 60:.1f} min; "
          f"{result.rendered} pieces rendered now, {result.reused} kept from an earlier run)")
    if progress.retries:
        progress.note(f"{progress.retries} bad take(s) found (see the [retry] lines above)")
    return 0


def book_voice(args, info: EngineInfo, saved: tuple[str, ...]) -> tuple[VoiceChoice, Audio | None]:
    """The reader's voice: --prompt-wav (a recording, with --prompt-text), --voice (a saved voice, a preset or
    "default"), --speaker (a preset), else the default voice; --instruct adds a style to any of them."""
    from ..audio import read_audio
    from ..studio.voice_map import VoiceChoice, choice_from_name

    instruct = args.instruct.strip()
    if args.prompt_wav:
        return (VoiceChoice("sample", Path(args.prompt_wav).name, args.prompt_text.strip(), instruct),
                read_audio(args.prompt_wav, "sample recording"))
    if args.voice:
        return replace(choice_from_name(args.voice, info, saved), instruct=instruct), None
    if args.speaker:
        return VoiceChoice("preset", args.speaker, instruct=instruct), None
    return VoiceChoice(instruct=instruct), None

