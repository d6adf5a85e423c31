"""`python -m cosyvoice_ui ...`: synth, dub, voices, glossary, transcribe, detect, download, list-models, parity,
serve.

The CLI is a thin shell over the engine: this module builds the parser and dispatches to the command modules
(`synth.py`, `studio.py` for scripts and books, `dub.py` for dubbing, `glossary.py`, `transcribe.py`, `detect.py`,
`batch.py`); errors are printed as one line with the fix, and failures exit non-zero.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..errors import CosyVoiceError
from .common import TerminalProgress, load_engine
from .detect import add_detect_parser, cmd_detect
from .dub import add_dub_parser, cmd_dub
from .glossary import add_glossary_parser, cmd_glossary
from .synth import add_synth_parser, cmd_synth
from .transcribe import add_transcribe_parser, cmd_transcribe, download_any, list_asr_models

_load = load_engine  # the name tests and older callers use

log = logging.getLogger(__name__)


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
    add_synth_parser(sub)
    add_dub_parser(sub)
    _add_voices(sub)
    add_glossary_parser(sub)
    add_transcribe_parser(sub)
    add_detect_parser(sub)
    d = sub.add_parser("download", help="download a catalogue model into pretrained_models/NAME (a speech "
                       "recognition model, e.g. whisper-small, into pretrained_models/asr/NAME)",
                       epilog=download_names(), formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("name", help="a name listed below (`list-models` shows what is installed)")
    d.add_argument("--models-dir", type=Path, default=Path("pretrained_models"))
    lm = sub.add_parser("list-models", help="show the catalogues (speech and recognition models) and what is "
                        "installed")
    lm.add_argument("--models-dir", type=Path, default=Path("pretrained_models"))
    pa = sub.add_parser("parity", help="check the engine against golden data computed by upstream")
    pa.add_argument("fixture_dir", type=Path)
    # serve and cluster hand every flag (--help included) to the app's own parser, which lists its options
    sv = sub.add_parser("serve", help="start the web app and REST API (same flags as app.py)", add_help=False)
    sv.add_argument("app_args", nargs=argparse.REMAINDER)
    cl = sub.add_parser("cluster", help="serve the REST API from engine replicas on Ray Serve (same flags as app.py, "
                        "plus --models, --replicas, --replica-gpus ...; needs requirements-serve.txt)", add_help=False)
    cl.add_argument("app_args", nargs=argparse.REMAINDER)
    return parser


def download_names() -> str:
    """The names `download` takes, with their size and what they are (the catalogues' own words)."""
    from ..cosyvoice.hub import catalogue
    from ..serving.transcription import POCKETSPHINX, Transcriber
    from ..known_models import recommended_model

    best = recommended_model()
    lines = ["speech models (into --models-dir/NAME):"]
    for entry in catalogue():
        mark = "  (recommended)" if best is not None and entry.name == best.name else ""
        lines.append(f"  {entry.name:26} {entry.size_gb:4.1f} GB  {entry.description}{mark}")
    lines.append("speech recognition, for Transcribe (into --models-dir/asr/NAME):")
    lines += [f"  {choice.name:26} {choice.size_gb:4.1f} GB  {choice.description}".rstrip()
              for choice in Transcriber(None).choices() if choice.name != POCKETSPHINX and choice.size_gb > 0]
    return "\n".join(lines)


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
        engine = _load(args, TerminalProgress())
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
    path = download_any(args.name, args.models_dir, TerminalProgress())
    print(f"downloaded to {path}")
    return 0


def cmd_list_models(args) -> int:
    from ..cosyvoice.hub import catalogue, find_models

    installed = {p.name for p in find_models(args.models_dir)}
    entries = catalogue()
    for entry in entries:
        state = "installed" if entry.name in installed else "available"
        note = "" if entry.supported else " (not supported yet)"
        print(f"{entry.name:26} {state:10} {entry.size_gb:4.1f} GB  {entry.description}{note}")
    for name in sorted(installed - {e.name for e in entries} - {"asr"}):
        print(f"{name:26} installed  (local folder)")
    list_asr_models(args.models_dir)
    return 0


def cmd_parity(args) -> int:
    from ..cosyvoice.parity import format_table, run_parity, verdict

    results = run_parity(args.fixture_dir)
    passed, line = verdict(results)
    print(format_table(results))
    print(line)
    return 0 if passed else 1


def cmd_serve(args) -> int:
    if "--ray" in args.app_args:  # `serve --ray ...` is `cluster ...`
        return cmd_cluster(argparse.Namespace(app_args=[a for a in args.app_args if a != "--ray"]))
    from ..web.flags import main as app_main

    return app_main(args.app_args, prog="python -m cosyvoice_ui serve")


def cmd_cluster(args) -> int:
    from ..cluster.launch import main as cluster_main

    return cluster_main(args.app_args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # argparse's REMAINDER drops a remainder that starts with an option, so `serve --port 7860` would be
    # refused: serve takes what the CLI does not know and hands it to the web app's own parser.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        if args.command not in ("serve", "cluster"):
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        args.app_args = unknown + list(args.app_args)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    handlers = {"synth": cmd_synth, "voices": cmd_voices, "glossary": cmd_glossary, "transcribe": cmd_transcribe,
                "download": cmd_download, "list-models": cmd_list_models, "parity": cmd_parity, "serve": cmd_serve,
                "cluster": cmd_cluster, "detect": cmd_detect, "dub": cmd_dub}
    try:
        return handlers[args.command](args)
    except CosyVoiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
