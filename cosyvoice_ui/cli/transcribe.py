"""`transcribe AUDIO`: what is said in a recording (e.g. a voice sample's transcript for zero-shot cloning), and
the speech recognisers' side of `download` and `list-models`.

Recognition runs through `serving.transcription` (a downloaded Whisper model under `pretrained_models/asr/`,
else pocketsphinx for English), the same service the UI's Transcribe buttons and the REST route use.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import InvalidRequest
from .common import TerminalProgress


def add_transcribe_parser(sub) -> None:
    p = sub.add_parser("transcribe", help="print what is said in a recording (e.g. a voice sample's transcript)")
    p.add_argument("audio", type=Path, help="the recording (wav, flac, mp3, ...)")
    p.add_argument("--language", default=None, help="its language (en, zh, ja, ...; default: detect)")
    p.add_argument("--asr-model", default="auto", metavar="NAME",
                   help="auto (a downloaded Whisper model, else pocketsphinx for English), pocketsphinx, or a "
                        "model name under --models-dir/asr (see list-models)")
    p.add_argument("--models-dir", type=Path, default=Path("pretrained_models"))


def cmd_transcribe(args) -> int:
    from ..audio import TRANSCRIPTION_LIMITS, read_audio
    from ..serving.transcription import backend_for, shared_transcriber

    audio = read_audio(args.audio, "recording", TRANSCRIPTION_LIMITS)
    transcriber = shared_transcriber(args.models_dir)
    transcript = transcriber.transcribe(audio, args.language, TerminalProgress(), backend=backend_for(args.asr_model))
    print(transcript.text)
    print(f"(heard by {transcript.backend}, language {transcript.language or 'unknown'})", file=sys.stderr)
    if transcript.rough:
        print("(a rough transcript: check and correct it against the recording before cloning with it)",
              file=sys.stderr)
    return 0


def asr_names(models_dir: Path) -> list[str]:
    """The downloadable speech recognisers' names (e.g. whisper-small)."""
    from ..serving.transcription import POCKETSPHINX, Transcriber

    return [c.name for c in Transcriber(models_dir).choices() if c.name != POCKETSPHINX and c.size_gb > 0]


def download_any(name: str, models_dir: Path, progress) -> Path:
    """`download NAME`: a CosyVoice catalogue model into `models_dir/NAME`, or a speech recogniser of the ASR
    catalogue into `models_dir/asr/NAME`, with progress."""
    from ..cosyvoice.hub import catalogue, download

    speech = [entry.name for entry in catalogue()]
    if name.lower() in (n.lower() for n in speech):
        return download(name, models_dir, progress=progress)
    recognisers = asr_names(models_dir)
    if name.lower() in (n.lower() for n in recognisers):
        from ..serving.transcription import Transcriber

        return Transcriber(models_dir).download(name, progress)
    raise InvalidRequest("model_unknown", f"unknown model {name!r}; choose one of: {', '.join(speech)} (speech) or "
                         f"{', '.join(recognisers)} (speech recognition, for transcripts)", model=name)


def list_asr_models(models_dir: Path) -> None:
    """The speech recognisers: the downloadable ones, any other Whisper folder, and pocketsphinx."""
    from ..serving.transcription import Transcriber

    print(f"\nspeech recognition (transcripts; downloads go to {Path(models_dir) / 'asr'}):")
    for choice in Transcriber(models_dir).choices():
        state = "installed" if choice.ready else ("available" if choice.size_gb else "missing")
        size = f"{choice.size_gb:4.1f} GB" if choice.size_gb else "   -   "
        print(f"{choice.name:26} {state:10} {size}  {choice.description}")
