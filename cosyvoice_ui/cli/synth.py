"""`synth`: one text, a text file (`batch.py`), a multi-voice script or a book (`studio.py`) → audio files.

Every form applies the pronunciation glossary (`--glossary`) to the text before the request is checked, runs
the synthesis through the bad-take guard (`serving.takes.guarded_synthesis`, policy from `--take-retries` /
`--no-take-check`, retries printed on stderr) and can write subtitles (`--srt` / `--vtt`) whose times come from
the rendered segments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import InvalidRequest
from ..types import Mode
from .common import (TerminalProgress, build_request, cli_settings, glossary_store, load_engine, load_glossary, speech_jobs,
                     subtitle_targets, write_audio, write_subtitles)


SYNTH_EXAMPLES = """examples:
  python -m cosyvoice_ui synth --text "Hello there."              # writes out.wav (the next free name) with
                                                                  # the default voice, even with no model
  python -m cosyvoice_ui synth --text "Nice to meet you." --prompt-wav me.wav --prompt-text "what me.wav says" \\
      --out clone.wav --srt                                       # your voice, with subtitles beside
  python -m cosyvoice_ui synth --book novel.epub --voice narrator # an audiobook into the folder novel/
"""


def add_synth_parser(sub) -> None:
    from ..web.flags import add_precision_flag, add_take_flags, add_watermark_flag  # the app's flags, same help

    p = sub.add_parser("synth", help="synthesise speech to an audio file (a text, a text file, a script, a book)",
                       usage="%(prog)s (--text TEXT | --text-file FILE | --script FILE | --book FILE) [options]",
                       description="Speak a text, a text file, a dialogue script or a book into audio files.\n\n"
                       + SYNTH_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_argument_group("what to say (one of)")
    what.add_argument("--text", default="", help="what to say")
    what.add_argument("--text-file", type=Path, help="one utterance per line → numbered files (or --join)")
    what.add_argument("--script", type=Path, help="a dialogue: one line per utterance, `Name: text`, `[Name] text` "
                      "or plain text (the narrator); rendered into a resumable project, then mixed into --out")
    what.add_argument("--book", type=Path, help="an EPUB, TXT or Markdown book → one file per chapter and a "
                      "chaptered book in the folder --out (resumable: a rerun continues)")
    voice = p.add_argument_group("which voice (default: the model's default voice)")
    voice.add_argument("--speaker", help="preset speaker (sft/instruct); default: the model's default voice "
                       "(`voices default ID` picks a saved one)")
    voice.add_argument("--voice", help="saved voice id (see `voices list`), instead of --prompt-wav; with --book "
                       "also a preset speaker or `default`")
    voice.add_argument("--prompt-wav", type=Path, help="voice sample (zero_shot, cross_lingual, vc target voice)")
    voice.add_argument("--prompt-text", default="", help="transcript of --prompt-wav (zero_shot)")
    voice.add_argument("--source-wav", type=Path, help="speech to convert (vc)")
    voice.add_argument("--instruct", default="", help="style description (instruct)")
    voice.add_argument("--mode", default=None, choices=[m.value for m in Mode],
                       help="default: vc with --source-wav; zero_shot with a voice and its transcript, "
                            "cross_lingual without one; instruct with --instruct; else sft")
    voice.add_argument("--voice-match", default="quick", choices=["quick", "refine"],
                       help="offline default voice only: how closely to match --prompt-wav (refine takes ~1 min)")
    voice.add_argument("--voices-dir", type=Path, default=Path("voices"))
    out = p.add_argument_group("output")
    out.add_argument("--out", type=Path, default=None,
                     help="output file (a folder with --text-file or --book); default: out.wav (the next free "
                          "name), out/ for --text-file, SCRIPT.wav for --script, BOOK/ for --book")
    out.add_argument("--format", default=None, help="wav, mp3, flac or pcm (default: from --out's extension)")
    out.add_argument("--srt", nargs="?", const="", default=None, metavar="FILE",
                     help="also write SRT subtitles (default file: --out with .srt)")
    out.add_argument("--vtt", nargs="?", const="", default=None, metavar="FILE",
                     help="also write WebVTT subtitles (default file: --out with .vtt)")
    out.add_argument("--loudness", type=float, default=None, help="normalise to this LUFS (e.g. -20); off by default")
    out.add_argument("--join", action="store_true", help="with --text-file: one output file")
    out.add_argument("--speed", type=float, default=1.0)
    out.add_argument("--seed", type=int, default=None)
    out.add_argument("--stream", action="store_true", help="write chunks as they are produced")
    studio = p.add_argument_group("scripts and books")
    studio.add_argument("--voices", type=Path, help="with --script: JSON of name → voice: a preset, a saved voice id, "
                        "{\"sample\": \"bob.wav\", \"transcript\": \"...\"}, {\"instruct\": \"...\"} (kept in the "
                        "project)")
    studio.add_argument("--project", type=Path, help="with --script: the project folder (default: OUT.project beside "
                        "--out); a rerun continues it")
    studio.add_argument("--stems", type=Path, metavar="DIR", help="with --script: also write one track per speaker "
                        "here")
    studio.add_argument("--gap", type=float, default=None, metavar="SECONDS",
                        help="with --script: silence between lines (default 0.4, kept in the project)")
    studio.add_argument("--book-format", default="m4b", choices=["m4b", "mp3"],
                        help="with --book: the whole book's file")
    checks = p.add_argument_group("pronunciation and checks")
    checks.add_argument("--glossary", default=None, metavar="FILE_OR_ID",
                        help="pronunciation glossary: a JSON file or a saved glossary id (see `glossary list`)")
    checks.add_argument("--glossary-dir", type=Path, default=Path("glossaries"), help="where saved glossaries are kept")
    checks.add_argument("--blocked-words", type=Path, default=None, metavar="FILE",
                        help="refuse texts holding a word of this file (one per line), as the app's --blocked-words "
                             "does")
    checks.add_argument("--no-text-frontend", action="store_true", help="skip text normalisation and splitting")
    checks.add_argument("--audit-log", type=Path, default=None, metavar="FILE",
                        help="add one JSON line per synthesis to FILE, as the app's --audit-log does (no audio, no "
                             "text: their hashes)")
    add_take_flags(checks)
    add_watermark_flag(checks)
    model = p.add_argument_group("model and speed")
    model.add_argument("--model-dir", type=Path, help="model folder (default: first one in pretrained_models/, else "
                       "the offline default voice)")
    model.add_argument("--device", default="auto")
    add_precision_flag(model)
    model.add_argument("--engine-url", help="synthesise on a running instance (http://host:7860) instead of locally")
    model.add_argument("--api-key", default=None, help="API key of --engine-url (or COSYVOICE_API_KEYS)")


def default_out(args) -> Path:
    """Where the output goes when --out is not given: a new file for one text (never over an earlier result),
    fixed names for the resumable forms (a rerun continues them)."""
    if args.book:
        return Path(Path(args.book).stem or "book")
    if args.script:
        return Path(f"{Path(args.script).stem or 'script'}.wav")
    if args.text_file and not args.join:
        return Path("out")
    if args.text_file:
        return Path(f"out.{args.format or 'wav'}")
    return next_free(Path(f"out.{(args.format or 'wav').lower()}"))


def next_free(path: Path) -> Path:
    """`path`, or `name-2.ext`, `name-3.ext`, ... : the first that does not exist yet."""
    number = 2
    candidate = path
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
        number += 1
    return candidate


def check_combination(args) -> None:
    """Refuse flags that do not go together, before any model loads."""
    forms = [flag for flag, given in (("--text-file", args.text_file), ("--script", args.script),
                                      ("--book", args.book)) if given]
    if len(forms) > 1:
        raise InvalidRequest("flags_conflict", f"{' and '.join(forms)} cannot be used together; run one at a time")
    if forms and args.text.strip():
        raise InvalidRequest("flags_conflict", f"--text and {forms[0]} cannot be used together; put the text in "
                             "the file, or drop the file")
    for flag, value, needs in (("--voices", args.voices, args.script), ("--stems", args.stems, args.script),
                               ("--project", args.project, args.script), ("--gap", args.gap, args.script)):
        if value is not None and not needs:
            raise InvalidRequest("flags_conflict", f"{flag} works with --script only")
    if args.book and (args.srt is not None or args.vtt is not None):
        raise InvalidRequest("flags_conflict", "--srt/--vtt do not apply to --book: every chapter gets its own SRT "
                             "in the output folder")
    if args.text_file and not args.join:
        for fmt in ("srt", "vtt"):
            if getattr(args, fmt):
                raise InvalidRequest("flags_conflict", f"with numbered output every file gets its own .{fmt} beside it: "
                                     f"pass --{fmt} without a file name (or add --join for one file)")


def cmd_synth(args) -> int:
    from ..audio import check_format

    check_combination(args)
    if args.out is None:
        args.out = default_out(args)
    if args.script:
        from .studio import synth_script

        return synth_script(args)
    if args.book:
        from .studio import synth_book

        return synth_book(args)
    if not args.text_file:  # a bad format is refused before the model loads, not after the synthesis
        check_format(args.format or (args.out.suffix.lstrip(".") or "wav"))
    glossary = load_glossary(args.glossary, glossary_store(args))
    cli_settings(args)  # a bad --take-retries is refused before the model loads
    progress = TerminalProgress()
    engine = load_engine(args, progress)
    if args.voice:
        use_saved_voice(engine, args)
    if args.text_file:
        from .batch import synth_text_file

        speech, options = speech_jobs(args, glossary)  # each file's loudness is set when it is written
        return synth_text_file(engine, args, speech, options, progress)
    speech, options = speech_jobs(args, glossary, args.loudness)
    return _synth_one(engine, args, speech, options, progress)


def _synth_one(engine, args, speech, options, progress: TerminalProgress) -> int:
    from ..serving.jobs import stream_on

    job = speech.prepare(build_request(args, args.text), options, engine.info)
    live = stream_on(engine, job, speech.resolver, progress)
    for number, chunk in enumerate(live.chunks(), 1):
        if args.stream:
            print(f"chunk {number}: segment {chunk.segment + 1}/{chunk.segments}, "
                  f"{len(chunk.samples) / chunk.sample_rate:.2f} s", file=sys.stderr)
    result = live.result()
    write_audio(args.out, result.samples, result.sample_rate, args.format, None)  # its loudness is applied
    print(f"wrote {args.out} ({result.seconds:.2f} s at {result.sample_rate} Hz)")
    for fmt, path in subtitle_targets(args, args.out):
        write_subtitles(path, list(result.cues), fmt)
        print(f"wrote {path} ({len(result.cues)} cue{'s' if len(result.cues) != 1 else ''})")
    return 0


def use_saved_voice(engine, args) -> None:
    """`--voice ID`: register the saved voice with the engine and speak with it."""
    from ..serving.voices import VoiceLibrary

    library = VoiceLibrary(args.voices_dir)
    voice = library.require(args.voice)
    engine.register_voice(voice.id, library.audio(voice.id), voice.transcript, library.path(voice.id))
    args.speaker = voice.id
    args.voice_transcript = voice.transcript
