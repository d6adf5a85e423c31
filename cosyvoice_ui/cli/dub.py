"""`dub VIDEO --cues target.srt --out dubbed.mp4`: the same voices speaking the subtitles' language, on cue.

The cues (an SRT or WebVTT in the target language, speakers labelled as in scripts) and the video make a
dubbing project (`studio.dub`) in `--project` (default: OUT.dub beside `--out`); each cue is one speech job
(`serving.jobs`, built by `common.speech_jobs`) in its speaker's voice, by default cut from the video itself.
Rerunning the same command renders only the cues without a finished take; a changed subtitle file keeps the takes
of the cues it did not change. Without `--cues` the video's speech is transcribed into cues (`studio.dub_transcribe`),
its speakers told apart by voice (`--speakers`), and written to the project's cues.srt, to translate and give back.
Ctrl-C stops cleanly (exit 130) and says how to resume.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import InvalidRequest
from .common import TerminalProgress, glossary_store, load_engine, load_glossary, retries_reported, speech_jobs

DUB_EXAMPLES = """examples:
  python -m cosyvoice_ui dub talk.mp4 --cues talk.zh.srt --out talk.zh.mp4 --srt
  python -m cosyvoice_ui dub talk.mp4 --cues talk.zh.srt --voices voices.json --out talk.zh.mp4 --stems stems/ \\
      --source-lang en --lang zh --max-speed 1.25 --original replace

The fit of each cue: its take is played faster or slower within --min-speed..--max-speed (pitch kept), then
padded with silence, then allowed to run into the gap before the next cue (unless --no-overflow); a cue that still
does not fit is reported with its overrun in seconds (and cut at the next cue's start until it is redone).
A cue can have its own fit (--fit 4 --fit-speed 0.85-1.4 --fit-overflow off; --fit-clear 4 gives it the
project's again): its take is fitted anew, nothing is rendered again.
"""


def add_dub_parser(sub) -> None:
    from ..web.flags import add_precision_flag, add_take_flags, add_watermark_flag  # the app's flags, same help

    p = sub.add_parser("dub", help="dub a video: its subtitles spoken in the original voices, on cue",
                       description="Dub a video (or audio file) from subtitles in the target language.\n\n"
                       + DUB_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("media", type=Path, help="the video or audio file to dub")
    p.add_argument("--cues", type=Path, help="SRT or WebVTT in the target language; speakers as \"Name: text\" or "
                   "\"[Name] text\" (without it the video's speech is transcribed into cues, written to the "
                   "project's cues.srt to translate or correct and give back with --cues)")
    p.add_argument("--voices", type=Path, help="JSON of speaker → voice (a preset, a saved voice id, {\"sample\": "
                   "\"bob.wav\"}, ...); speakers not named speak in their own voice cut from the video")
    p.add_argument("--out", type=Path, required=True, help="the dubbed file (.mp4, .mkv, .mov; .m4a for audio)")
    p.add_argument("--srt", nargs="?", const="", default=None, metavar="FILE",
                   help="also write the adjusted SRT, the times actually spoken (default file: --out with .srt)")
    p.add_argument("--vtt", nargs="?", const="", default=None, metavar="FILE",
                   help="also write the adjusted WebVTT (default file: --out with .vtt)")
    p.add_argument("--stems", type=Path, metavar="DIR", help="also write one WAV track per speaker here")
    p.add_argument("--project", type=Path, help="the project folder (default: OUT.dub beside --out); a rerun "
                   "continues it")
    lang = p.add_argument_group("languages and fit")
    lang.add_argument("--lang", default=None, help="the subtitles' language, e.g. zh (default: guessed from them); "
                      "tags the dubbed track")
    lang.add_argument("--source-lang", default="und", help="the video's language, e.g. en (tags the original "
                      "track; when it equals --lang the cues are cloned zero-shot with their own words)")
    lang.add_argument("--min-speed", type=float, default=None, help="slowest a take may be played (default 0.85)")
    lang.add_argument("--max-speed", type=float, default=None, help="fastest a take may be played (default 1.2)")
    lang.add_argument("--no-overflow", action="store_true", help="do not let a take run into the gap after its "
                      "cue (it is reported with its overrun instead)")
    lang.add_argument("--original", choices=["duck", "replace"], default=None, help="the original sound under the "
                      "dub: kept quieter (duck, the default) or left out of the mix (replace)")
    lang.add_argument("--duck-db", type=float, default=None, help="how much quieter the original is under speech "
                      "(default 12 dB)")
    lang.add_argument("--seed", type=int, default=None, help="seed of every cue's first take (default 1)")
    lang.add_argument("--asr-model", default="auto", metavar="NAME", help="without --cues: the recogniser (auto: "
                      "a downloaded Whisper model, else pocketsphinx for English; see list-models)")
    lang.add_argument("--speakers", default="auto", metavar="N", help="without --cues: how many people speak (auto: "
                      "told apart by their voices, at most 8; 1: one voice for every cue); cues.srt names them "
                      "\"Speaker 1: ...\", to correct there")
    lang.add_argument("--models-dir", type=Path, default=Path("pretrained_models"))
    cues = p.add_argument_group("cues (numbered from 1, as printed)")
    cues.add_argument("--regenerate", default="", metavar="N[,N]", help="a new take (a new seed) of these cues")
    cues.add_argument("--take", action="append", default=[], metavar="N=K", help="pick take K of cue N (repeatable)")
    cues.add_argument("--lock", default="", metavar="N[,N]", help="keep these cues' takes (no new take)")
    cues.add_argument("--unlock", default="", metavar="N[,N]", help="let these cues render again")
    cues.add_argument("--fit", default="", metavar="N[,N]", help="give these cues their own fit: --fit-speed and/or "
                      "--fit-overflow (what they leave out stays the project's); nothing is rendered again")
    cues.add_argument("--fit-speed", default=None, metavar="MIN-MAX", help="the speed range of the --fit cues, "
                      "e.g. 0.9-1.3")
    cues.add_argument("--fit-overflow", choices=["on", "off"], default=None, help="whether the --fit cues may run "
                      "into the gap after them")
    cues.add_argument("--fit-clear", default="", metavar="N[,N]", help="these cues follow the project's fit again")
    checks = p.add_argument_group("checks")
    checks.add_argument("--voices-dir", type=Path, default=Path("voices"))
    checks.add_argument("--glossary", default=None, metavar="FILE_OR_ID", help="pronunciation glossary")
    checks.add_argument("--glossary-dir", type=Path, default=Path("glossaries"))
    checks.add_argument("--blocked-words", type=Path, default=None, metavar="FILE")
    checks.add_argument("--audit-log", type=Path, default=None, metavar="FILE")
    add_take_flags(checks)
    add_watermark_flag(checks)
    model = p.add_argument_group("model")
    model.add_argument("--model-dir", type=Path, help="model folder (default: first one in pretrained_models/, "
                       "else the offline default voice)")
    model.add_argument("--device", default="auto")
    add_precision_flag(model)
    model.add_argument("--engine-url", help="synthesise on a running instance instead of locally")
    model.add_argument("--api-key", default=None)


def cmd_dub(args) -> int:
    from ..studio.dub import DubProject, DubSettings
    from ..studio.dub_cues import FitPolicy, guess_language, read_cues
    from ..studio.dub_media import check_output, probe
    from ..studio.dub_render import export, render_cue, render_dub
    from .studio import read_json, read_text, read_voice_map

    out = check_output(Path(args.out))
    fit_changes = _fit_flags(args)  # a mistyped flag is refused before any work
    probe(args.media)  # an unreadable video, or one without sound, is refused before anything else
    cues = read_cues(read_text(args.cues, "subtitle file")) if args.cues else None
    voice_map = read_json(args.voices, "voice map") if args.voices else None
    folder = Path(args.project) if args.project else out.with_name(out.name + ".dub")
    glossary = load_glossary(args.glossary, glossary_store(args))
    speech, options = speech_jobs(args, glossary, surface="dub")
    progress = TerminalProgress()
    source_lang = args.source_lang.strip().lower() or "und"
    engine = None
    if DubProject.exists(folder):
        project = DubProject.open(folder)
        if not project.same_media(args.media):
            raise InvalidRequest("dub_project_other_media", f"the project {folder.name!r} dubs another file "
                                 f"({project.media.get('name')!r}); give another --project folder",
                                 folder=folder.name)
        changed = project.update_cues(cues) if cues is not None else 0
        if changed:
            progress.note(f"the subtitles changed since the last run: {changed} cue(s) are new or edited")
    elif cues is None:  # the source's own words, to re-voice as they are or to translate and give back
        engine = load_engine(args, progress)  # first: its speaker network, if it has one, tells the voices apart
        cues, heard = _transcribe(args, progress, engine)
        source_lang = source_lang if source_lang != "und" else (heard or "und")
        project = DubProject.create(folder, args.media, cues, DubSettings(
            source_lang=source_lang, target_lang=(args.lang or source_lang).strip().lower()))
        written = write_cue_file(project)
        progress.note(f"transcribed {len(cues)} cue(s) into {written}, {_voices(project)}: translate or correct "
                      f"it there and run again with --cues {written} (now dubbing the words as heard)")
    else:
        project = DubProject.create(folder, args.media, cues, DubSettings(
            source_lang=source_lang, target_lang=(args.lang or guess_language([c.text for c in cues])).strip().lower()))
    _apply_settings(project, args, FitPolicy)
    engine = engine or load_engine(args, progress)
    if voice_map is not None:
        for name, (choice, sample) in read_voice_map(args.voices, engine.info, speech.library.ids(),
                                                     voice_map).items():
            if name not in project.speakers():
                progress.note(f"note: the voice map names {name!r}, who speaks no cue; skipped")
                continue
            project.set_voice(name, choice, sample)
    project.save()
    total = len(project.cues)
    todo = sum(1 for cue in project.cues if project.needs_render(cue, engine.info))
    if todo < total:
        progress.note(f"resuming {folder}: {total - todo} of {total} cues are rendered already; "
                      + (f"rendering the other {todo}" if todo else "nothing left to render"))
    regenerate = _edit_cues(project, args, fit_changes)
    try:
        with retries_reported(progress):
            rendered = render_dub(project, engine, speech, options, progress)
            for cue_id in regenerate:
                if cue_id not in rendered:
                    render_cue(project, cue_id, engine, speech, options, progress=progress)
    except KeyboardInterrupt:
        done = sum(1 for cue in DubProject.open(folder).cues if cue.take is not None)
        print(f"interrupted: {done} of {total} cues are rendered and saved in the project {folder}; run the same "
              "command again to render the rest", file=sys.stderr)
        return 130
    targets = {fmt: (Path(value) if str(value) else out.with_suffix(f".{fmt}"))
               for fmt, value in (("srt", args.srt), ("vtt", args.vtt)) if value is not None}
    result = export(project, out, targets.get("srt"), targets.get("vtt"), args.stems)
    for path in result.files:
        print(f"wrote {path}")
    for piece in result.placed:
        fitted = piece.fit
        how = f"speed {fitted.speed:.2f}" + (f", {fitted.overflow:.2f} s into the gap" if fitted.overflow else "") \
            + (", its own fit" if piece.cue.fit else "")
        flag = f"  OVERRUN {fitted.overrun:.2f} s (cut there): reword or regenerate it" if fitted.flagged else ""
        print(f"cue {piece.number:>3} {piece.cue.speaker}: {piece.start:.2f}-{piece.start + fitted.placed:.2f} s "
              f"({how}){flag}")
    flagged = result.flagged
    print(f"dubbed {total} cues ({len(result.placed) - len(flagged)} fit, {len(flagged)} overrun); project {folder}")
    return 0


def _fit_flags(args) -> dict | None:
    """What --fit-speed and --fit-overflow set for the --fit cues (None without --fit), or a refusal that says how
    to write them."""
    given = args.fit_speed is not None or args.fit_overflow is not None
    if not str(args.fit or "").strip():
        if given:
            raise InvalidRequest("dub_fit_flag", "--fit-speed and --fit-overflow need the cues they apply to: add "
                                 "--fit N[,N], e.g. --fit 4 --fit-speed 0.9-1.3")
        return None
    if not given:
        raise InvalidRequest("dub_fit_flag", f"--fit {args.fit} needs what to change: --fit-speed MIN-MAX (e.g. "
                             "0.9-1.3) and/or --fit-overflow on|off")
    changes = {}
    if args.fit_speed is not None:
        low, dash, high = str(args.fit_speed).strip().partition("-")
        try:
            if not dash:
                raise ValueError
            changes.update(min_speed=float(low), max_speed=float(high))
        except ValueError:
            raise InvalidRequest("dub_fit_flag", f"--fit-speed {str(args.fit_speed)[:20]!r}: write the range as "
                                 "MIN-MAX, e.g. --fit-speed 0.9-1.3") from None
    if args.fit_overflow is not None:
        changes["overflow"] = args.fit_overflow == "on"
    return changes


def _edit_cues(project, args, fit_changes: dict | None = None) -> list[str]:
    """--unlock, --take, --lock, --fit-clear, --fit (in that order, saved), and the ids of the cues --regenerate
    asks for."""
    from ..studio.dub_cues import own_fit

    def numbers(value: str, flag: str) -> list[int]:
        found = []
        for part in str(value or "").split(","):
            if not part.strip():
                continue
            if not part.strip().isdigit() or not 1 <= int(part) <= len(project.cues):
                raise InvalidRequest("dub_cue_unknown", f"{flag} {part.strip()!r}: the cues are numbered 1-"
                                     f"{len(project.cues)}", cue=part.strip())
            found.append(int(part))
        return found

    for number in numbers(args.unlock, "--unlock"):
        project.lock(project.cues[number - 1].id, False)
    for pair in args.take:
        cue, _, take = str(pair).partition("=")
        if not take.strip().isdigit():
            raise InvalidRequest("dub_take_flag", f"--take {pair!r}: write it as CUE=TAKE, e.g. --take 3=1")
        project.choose(project.cues[numbers(cue, "--take")[0] - 1].id, int(take))
    for number in numbers(args.lock, "--lock"):
        project.lock(project.cues[number - 1].id, True)
    for number in numbers(args.fit_clear, "--fit-clear"):
        project.cues[number - 1].fit = None
    for number in numbers(args.fit, "--fit"):  # added to what the cue set before
        cue = project.cues[number - 1]
        cue.fit = own_fit(project.settings.policy, cue.fit, fit_changes, number)
    project.save()
    return [project.cues[number - 1].id for number in numbers(args.regenerate, "--regenerate")]


def _transcribe(args, progress, engine):
    from ..serving.transcription import backend_for, shared_transcriber, speaker_separation
    from ..studio.dub_transcribe import transcribed_cues

    speakers = speaker_separation(engine, args.speakers)
    language = args.source_lang if args.source_lang and args.source_lang != "und" else None
    return transcribed_cues(args.media, shared_transcriber(args.models_dir), language, backend_for(args.asr_model),
                            progress, speakers)


def _voices(project) -> str:
    """How many voices the transcription told apart, as the note after it says it."""
    names = project.speakers()
    return "one voice" if len(names) == 1 else f"{len(names)} voices ({', '.join(names)}: check who says what)"


def write_cue_file(project) -> Path:
    """The project's cues as `cues.srt` in its folder (speakers labelled when there are several)."""
    from ..files import write_atomic
    from ..serving.subtitles import Cue, render

    several = len(project.speakers()) > 1
    path = project.folder / "cues.srt"
    text = render([Cue(c.start, c.end, c.text, c.speaker) for c in project.cues], "srt", speakers=several)
    write_atomic(path, text.encode("utf-8"))
    return path


def _apply_settings(project, args, fit_policy) -> None:
    """The flags given on this run change the project's settings (flags left out keep what it has)."""
    from dataclasses import replace

    settings = project.settings
    policy = settings.policy
    if args.min_speed is not None or args.max_speed is not None or args.no_overflow:
        policy = fit_policy(args.min_speed if args.min_speed is not None else policy.min_speed,
                            args.max_speed if args.max_speed is not None else policy.max_speed,
                            policy.overflow and not args.no_overflow)
    changes = {"policy": policy}
    if args.original is not None:
        changes["original"] = args.original
    if args.duck_db is not None:
        changes["duck_db"] = args.duck_db
    if args.seed is not None:
        changes["seed"] = args.seed
    if args.lang:
        changes["target_lang"] = args.lang.strip().lower()
    if args.source_lang and args.source_lang != "und":
        changes["source_lang"] = args.source_lang.strip().lower()
    project.settings = replace(settings, **changes)
