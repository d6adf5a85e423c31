"""`python -m cosyvoice_ui ...`: synth, voices, download, list-models, parity, serve.

The CLI is a thin shell over the engine: it parses flags into a `SynthesisRequest`, prints errors as
one line with the fix, and exits non-zero on failure.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..errors import CosyVoiceError
from ..types import Mode, ProgressEvent

log = logging.getLogger(__name__)


class _TerminalProgress:
    """Draws one updating progress line on stderr."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.last = ""

    def __call__(self, event: ProgressEvent) -> None:
        line = f"[{event.stage:>8}] {event.fraction * 100:5.1f}% {event.message}"
        if self.enabled:
            sys.stderr.write("\r" + line[:110].ljust(110))
            sys.stderr.flush()
            if event.stage in ("done",) or (event.stage in ("load", "download") and event.fraction >= 1.0):
                sys.stderr.write("\n")
        elif line != self.last and event.fraction in (0.0, 1.0):
            print(line, file=sys.stderr)
        self.last = line


def _add_synth(sub) -> None:
    from ..web.flags import add_precision_flag  # the app's flag, same help

    p = sub.add_parser("synth", help="synthesise speech to an audio file")
    p.add_argument("--model-dir", type=Path, help="model folder (default: first one in pretrained_models/)")
    p.add_argument("--mode", default=None, choices=[m.value for m in Mode],
                   help="default: vc with --source-wav; zero_shot with a voice and its transcript, cross_lingual "
                        "without one; instruct with --instruct; else sft")
    p.add_argument("--text", default="", help="what to say")
    p.add_argument("--text-file", type=Path, help="one utterance per line → numbered files (or --join)")
    p.add_argument("--prompt-wav", type=Path, help="voice sample (zero_shot, cross_lingual, vc target voice)")
    p.add_argument("--prompt-text", default="", help="transcript of --prompt-wav (zero_shot)")
    p.add_argument("--source-wav", type=Path, help="speech to convert (vc)")
    p.add_argument("--speaker", help="preset speaker (sft/instruct); default: the model's default voice "
                   "(`voices default ID` picks a saved one)")
    p.add_argument("--voice", help="saved voice id (see `voices list`), instead of --prompt-wav")
    p.add_argument("--voices-dir", type=Path, default=Path("voices"))
    p.add_argument("--engine-url", help="synthesise on a running instance (http://host:7860) instead of locally")
    p.add_argument("--api-key", default=None, help="API key of --engine-url (or COSYVOICE_API_KEYS)")
    p.add_argument("--instruct", default="", help="style description (instruct)")
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stream", action="store_true", help="write chunks as they are produced")
    p.add_argument("--no-text-frontend", action="store_true", help="skip text normalisation and splitting")
    p.add_argument("--voice-match", default="quick", choices=["quick", "refine"],
                   help="offline default voice only: how closely to match --prompt-wav (refine takes ~1 min)")
    p.add_argument("--device", default="auto")
    add_precision_flag(p)
    p.add_argument("--format", default=None, help="wav, mp3, flac or pcm (default: from --out's extension)")
    p.add_argument("--loudness", type=float, default=None, help="normalise to this LUFS (e.g. -20); off by default")
    p.add_argument("--join", action="store_true", help="with --text-file: one output file")
    p.add_argument("--out", type=Path, required=True, help="output file (or folder with --text-file)")


def _add_voices(sub) -> None:
    p = sub.add_parser("voices", help="save, list and remove cloned voices")
    vs = p.add_subparsers(dest="voices_command", required=True)
    add = vs.add_parser("add", help="save a voice from a recording (its features are computed once)")
    add.add_argument("name")
    add.add_argument("--prompt-wav", type=Path, required=True, help="3-30 s of clear speech")
    add.add_argument("--prompt-text", default="", help="transcript of the recording (needed for zero_shot)")
    add.add_argument("--model-dir", type=Path, help="model that computes the features (default: the first one)")
    add.add_argument("--device", default="auto")
    ls = vs.add_parser("list", help="show saved voices")
    rm = vs.add_parser("rm", help="delete a saved voice")
    rm.add_argument("id")
    default = vs.add_parser("default", help="show, set or clear the saved voice used when no voice is named")
    default.add_argument("id", nargs="?", help="saved voice id to make the default")
    default.add_argument("--clear", action="store_true", help="back to the model's own default voice")
    for q in (add, ls, rm, default):
        q.add_argument("--voices-dir", type=Path, default=Path("voices"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cosyvoice_ui", description="CosyVoice voice-cloning TTS")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_synth(sub)
    _add_voices(sub)
    d = sub.add_parser("download", help="download a catalogue model into pretrained_models/NAME")
    d.add_argument("name")
    d.add_argument("--models-dir", type=Path, default=Path("pretrained_models"))
    lm = sub.add_parser("list-models", help="show the catalogue and what is installed")
    lm.add_argument("--models-dir", type=Path, default=Path("pretrained_models"))
    pa = sub.add_parser("parity", help="check the engine against golden data computed by upstream")
    pa.add_argument("fixture_dir", type=Path)
    sv = sub.add_parser("serve", help="start the web app and REST API (same flags as app.py)")
    sv.add_argument("app_args", nargs=argparse.REMAINDER)
    return parser


def _load(args, progress):
    if getattr(args, "engine_url", None):
        from ..serving.remote import RemoteEngine
        from ..settings import env_api_keys

        key = args.api_key or next(iter(env_api_keys()), None)
        return RemoteEngine(args.engine_url, api_key=key, progress=progress)
    from ..serving.backends import open_engine

    from ..settings import LoadOptions

    options = LoadOptions(device=args.device, precision=getattr(args, "precision", "stock"),
                          voices_dir=getattr(args, "voices_dir", None))
    return open_engine(args.model_dir, Path("pretrained_models"), options, progress)


def _use_voice(engine, args) -> None:
    """`--voice ID`: register the saved voice with the engine and speak with it."""
    from ..serving.voices import VoiceLibrary

    library = VoiceLibrary(args.voices_dir)
    voice = library.require(args.voice)
    engine.register_voice(voice.id, library.audio(voice.id), voice.transcript, library.path(voice.id))
    args.speaker = voice.id
    args.voice_transcript = voice.transcript


def _request_maker(engine, args):
    """`make(args, text)` → the request to run: flags, then the default voice where none is named
    (registered with the engine first when it is a saved or the built-in voice)."""
    from ..serving.default_voice import VoiceResolver
    from ..serving.voices import VoiceLibrary

    resolver = VoiceResolver(VoiceLibrary(args.voices_dir))

    def make(args, text: str):
        request, ref = resolver.apply(_request(args, text), engine.info, mode_given=bool(args.mode))
        resolver.ensure(engine, ref)
        return request

    return make


def _request(args, text: str):
    from ..audio import read_audio
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
        source_audio=read_audio(args.source_wav, "source audio") if args.source_wav else None,
        speed=args.speed, seed=args.seed, stream=args.stream, text_frontend=not args.no_text_frontend,
        voice_match=args.voice_match,
    )


def _write(path: Path, samples, rate: int, fmt: str | None, loudness: float | None) -> None:
    from ..audio import encode, normalize_loudness

    if loudness is not None:
        samples = normalize_loudness(samples, rate, loudness)
    fmt = fmt or (path.suffix.lstrip(".").lower() or "wav")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(samples, rate, fmt))


def cmd_synth(args) -> int:
    from ..audio import join_chunks

    from ..audio import check_format

    if not args.text_file:  # a bad format is refused before the model loads, not after the synthesis
        check_format(args.format or (args.out.suffix.lstrip(".") or "wav"))
    progress = _TerminalProgress()
    engine = _load(args, progress)
    if args.voice:
        _use_voice(engine, args)
    if args.text_file:
        from .batch import synth_text_file

        return synth_text_file(engine, args, _request_maker(engine, args), _write, progress)
    request = engine.check(_request_maker(engine, args)(args, args.text))
    pieces = []
    for chunk in engine.synthesize(request, progress=progress):
        pieces.append(chunk.samples)
        if args.stream:
            print(f"chunk {len(pieces)}: segment {chunk.segment + 1}/{chunk.segments}, "
                  f"{len(chunk.samples) / chunk.sample_rate:.2f} s", file=sys.stderr)
    samples = join_chunks(pieces)
    _write(args.out, samples, engine.info.sample_rate, args.format, args.loudness)
    print(f"wrote {args.out} ({len(samples) / engine.info.sample_rate:.2f} s at {engine.info.sample_rate} Hz)")
    return 0


def cmd_voices(args) -> int:
    from ..serving.voices import VoiceLibrary

    library = VoiceLibrary(args.voices_dir)
    if args.voices_command == "list":
        voices = library.list()
        for v in voices:
            cached = ", ".join(sorted(p.stem.removeprefix("features-") for p in library.path(v.id).glob("features-*")))
            text = v.transcript if len(v.transcript) <= 40 else v.transcript[:37] + "..."
            print(f"{v.id:24} {v.duration_s:5.1f} s  features: {cached or '-':6}  {v.name!r}  \"{text}\"")
        if not voices:
            print(f"no saved voices in {args.voices_dir} (add one: python -m cosyvoice_ui voices add NAME "
                  "--prompt-wav clip.wav --prompt-text '...')")
        return 0
    if args.voices_command == "default":
        if args.clear:
            library.set_default(None)
            print("no saved voice is the default now: the model's own default voice speaks")
        elif args.id:
            library.set_default(args.id)
            print(f"{args.id} is the default voice now (used when no voice or speaker is named)")
        else:
            current = library.default_id()
            print(current or "none: the model's own default voice (its default preset, or the built-in voice)")
        return 0
    if args.voices_command == "rm":
        if not library.remove(args.id):
            print(f"error: there is no saved voice {args.id!r}; saved voices: {', '.join(library.ids()) or 'none'}",
                  file=sys.stderr)
            return 1
        print(f"removed {args.id}")
        return 0
    from ..audio import read_audio
    from ..errors import InvalidRequest

    voice = library.add(args.name, read_audio(args.prompt_wav), args.prompt_text)
    try:
        engine = _load(args, _TerminalProgress())
        engine.register_voice(voice.id, library.audio(voice.id), voice.transcript, library.path(voice.id))
        note = f"features computed with {engine.info.name}"
    except InvalidRequest as exc:
        if exc.code != "voices_unsupported":
            library.remove(voice.id)
            raise
        note = f"{exc.message}; features will be computed when a CosyVoice model loads"
    except (CosyVoiceError, ImportError) as exc:  # no model here (or the offline backend is not installed)
        note = f"no model to compute features now ({exc}); they will be computed when one loads"
    print(f"saved voice {voice.id} ({voice.duration_s:.1f} s): {note}")
    print(f"use it: python -m cosyvoice_ui synth --voice {voice.id} --text '...' --out out.wav")
    return 0


def cmd_download(args) -> int:
    from ..cosyvoice.hub import download

    path = download(args.name, args.models_dir, progress=_TerminalProgress())
    print(f"downloaded to {path}")
    return 0


def cmd_list_models(args) -> int:
    from ..cosyvoice.hub import CATALOGUE, find_models

    installed = {p.name for p in find_models(args.models_dir)}
    for entry in CATALOGUE:
        state = "installed" if entry.name in installed else "available"
        note = "" if entry.supported else " (not supported yet)"
        print(f"{entry.name:26} {state:10} {entry.size_gb:4.1f} GB  {entry.description}{note}")
    for name in sorted(installed - {e.name for e in CATALOGUE}):
        print(f"{name:26} installed  (local folder)")
    return 0


def cmd_parity(args) -> int:
    from ..cosyvoice.parity import format_table, run_parity, verdict

    results = run_parity(args.fixture_dir)
    passed, line = verdict(results)
    print(format_table(results))
    print(line)
    return 0 if passed else 1


def cmd_serve(args) -> int:
    from ..web.flags import main as app_main

    return app_main(args.app_args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # argparse's REMAINDER drops a remainder that starts with an option, so `serve --port 7860` would be
    # refused: serve takes what the CLI does not know and hands it to the web app's own parser.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        if args.command != "serve":
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        args.app_args = unknown + list(args.app_args)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    handlers = {"synth": cmd_synth, "voices": cmd_voices, "download": cmd_download, "list-models": cmd_list_models,
                "parity": cmd_parity, "serve": cmd_serve}
    try:
        return handlers[args.command](args)
    except CosyVoiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
