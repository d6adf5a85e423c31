"""Command-line flags of the web app (`app.py`, `python -m cosyvoice_ui serve`) → `Settings` → server."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..settings import DEFAULT_AUDIT_LOG, Settings, default_take_retries, default_watermark, env_api_keys

log = logging.getLogger("cosyvoice_ui.app")


def _auth_pairs(values: list[str], auth_file: Path | None) -> tuple[tuple[str, str], ...]:
    lines = list(values or [])
    if auth_file is not None:
        try:
            lines += [ln.strip() for ln in auth_file.read_text(encoding="utf-8").splitlines()
                      if ln.strip() and not ln.lstrip().startswith("#")]
        except OSError as exc:
            raise SystemExit(f"error: cannot read --auth-file {auth_file}: {exc.strerror}") from exc
    pairs = []
    for line in lines:
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise SystemExit(f"error: --auth expects user:password, got {line!r}")
        pairs.append((user, password))
    return tuple(pairs)


def _origins(values: list[str]) -> tuple[str, ...]:
    from ..errors import InvalidRequest
    from .origin import parse_origin

    try:
        return tuple(dict.fromkeys(parse_origin(v) for v in values or ()))
    except InvalidRequest as exc:
        raise SystemExit(f"error: {exc.message}") from None


class PrecisionChoices:
    """`--precision`'s choices, `cosyvoice/precision.py`'s CHOICES (auto and the PRECISIONS), read only when the
    flag is given or help is shown: that module loads torch, which commands that never load a model should not
    wait for."""

    def __contains__(self, value: object) -> bool:
        return value in self._modes()

    def __iter__(self):
        return iter(self._modes())

    @staticmethod
    def _modes() -> tuple[str, ...]:
        from ..cosyvoice.precision import CHOICES

        return CHOICES


PRECISION_HELP = ("auto (default): fast on a CPU, stock on a GPU; stock: upstream's numbers; fast: int8 LLM, int8 "
                  "or bf16 flow and a bf16 vocoder where the CPU allows, fewer diffusion steps and a shorter flow "
                  "prompt (3.5-7x faster than stock on a CPU, a small, measured change to the sound); extra-fast: "
                  "fast without the flow's classifier-free guidance and with an int4 LLM (up to a third less time "
                  "again, a bigger change to the sound)")


def add_precision_flag(parser: argparse.ArgumentParser) -> None:
    """`--precision`, the same for the app and the CLI."""
    # A metavar of its own: argparse would otherwise list the choices (and so load them) while building the parser.
    parser.add_argument("--precision", default="auto", choices=PrecisionChoices(), metavar="MODE",
                        help=PRECISION_HELP)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="app.py", description="CosyVoice Studio: web UI and REST API")
    p.add_argument("--model-dir", type=Path, default=None,
                   help="model folder (default: the first one in --models-dir, else the offline default voice)")
    p.add_argument("--models-dir", type=Path, default=Path("pretrained_models"))
    p.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 = reachable from the network)")
    p.add_argument("--port", type=int, default=7860)
    p.add_argument("--share", action="store_true", help="also create a public *.gradio.live link")
    p.add_argument("--auth", action="append", default=[], metavar="USER:PASS",
                   help="UI login (repeatable); a public server without one gets a one-time login, printed at start")
    p.add_argument("--auth-file", type=Path, help="file with one user:password per line")
    p.add_argument("--api-key", action="append", default=[],
                   help="REST API key (repeatable; or COSYVOICE_API_KEYS); a public server without one gets a "
                        "one-time key, printed at start")
    p.add_argument("--no-auth", action="store_true",
                   help="serve --share or a non-loopback --host without the generated login and key (anyone who "
                        "can reach it can use it)")
    p.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                   help="a web origin (e.g. https://studio.example.org) whose pages may use this server: it may post "
                        "to it and read its answers with the login cookie (repeatable; by default only the "
                        "server's own page and the share link may)")
    p.add_argument("--idle-unload", type=float, default=600.0, metavar="SECONDS",
                   help="release the model after this many idle seconds (0 = never)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    add_precision_flag(p)
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--max-text-chars", type=int, default=5000)
    p.add_argument("--concurrency", type=int, default=1,
                   help="jobs running at once (others wait in the queue); on CosyVoice2/3 their LLM steps run "
                        "as one batch of this width, so a second request costs little more memory traffic")
    p.add_argument("--queue-size", type=int, default=32)
    p.add_argument("--rate-limit", type=int, default=None,
                   help="REST requests per minute per client (default: 60 on a public server, none on loopback; "
                        "0 = none)")
    p.add_argument("--temp-max-age-min", type=float, default=60.0, metavar="MINUTES",
                   help="delete Gradio's temp files (uploads, copies of results) after this many minutes "
                        "(checked every 15 min; 0 = keep)")
    p.add_argument("--results-max-age-min", type=float, default=0.0, metavar="MINUTES",
                   help="also delete generated audio in --output-dir (the history's files) after this many minutes "
                        "(default 0: keep them; e.g. 1440 on a busy public server)")
    p.add_argument("--max-upload-mb", type=float, default=20.0)
    p.add_argument("--blocked-words", type=Path,
                   help="file of words this server refuses to speak (one per line), on every tab, the REST and Gradio "
                        "APIs, scripts and books alike")
    p.add_argument("--engine-url", help="thin client: send synthesis to this remote instance")
    p.add_argument("--voices-dir", type=Path, default=Path("voices"))
    p.add_argument("--output-dir", type=Path, default=Path("outputs"))
    p.add_argument("--default-voice", default=None, metavar="NAME",
                   help="voice used when a request names none (a preset speaker or a saved voice id); default: "
                        "the offline voice's default preset, a model's first preset, or the built-in example voice")
    p.add_argument("--voice-aliases", type=Path, default=None, metavar="FILE",
                   help="JSON file mapping OpenAI voice names (alloy, nova, ...) to this server's voices")
    p.add_argument("--mcp", action="store_true",
                   help="also serve synthesis and voice tools over MCP (Gradio's MCP server at /gradio_api/mcp/)")
    p.add_argument("--projects-dir", type=Path, default=Path("projects"),
                   help="where script projects and audiobook jobs are kept (one folder each)")
    p.add_argument("--glossary-dir", type=Path, default=Path("glossaries"),
                   help="where saved pronunciation glossaries are kept")
    p.add_argument("--max-voices", type=int, default=1000, metavar="N",
                   help="saved voices kept at most (saving one more is refused until one is deleted; 0 = no cap)")
    p.add_argument("--max-glossaries", type=int, default=1000, metavar="N",
                   help="saved glossaries kept at most (0 = no cap)")
    p.add_argument("--max-projects", type=int, default=1000, metavar="N",
                   help="script projects and audiobook jobs kept at most (0 = no cap)")
    p.add_argument("--asr-model", default="auto", metavar="NAME",
                   help="speech recognition for Transcribe: auto (a downloaded Whisper model, else pocketsphinx "
                        "for English) or a model name under --models-dir/asr")
    add_take_flags(p)
    add_watermark_flag(p)
    add_accountability_flags(p)
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def add_accountability_flags(parser: argparse.ArgumentParser) -> None:
    """Consent and the audit trail on shared servers (docs/SECURITY.md)."""
    parser.add_argument("--require-consent", action=argparse.BooleanOptionalAction, default=None,
                        help="cloning from a new recording (clone, cross-lingual, instruct with a sample, voice "
                             "conversion, saving a voice, a script's or book's sample) needs the caller to confirm "
                             "its speaker agreed (the UI's box beside the sample; \"consent\": true in the API). "
                             "Default: required on a public server (--share or a non-loopback --host), not on "
                             "loopback")
    parser.add_argument("--audit-log", type=Path, default=None, metavar="FILE",
                        help="write one JSON line per synthesis and saved voice to FILE (who, surface, model, voice "
                             "or recording hash, text hash and length, whether the output is marked; no audio, no "
                             f"text), rotated at 10 MB, 5 old files kept. Default: {DEFAULT_AUDIT_LOG.as_posix()} in "
                             "the working folder on a public server, none on loopback")
    parser.add_argument("--no-audit-log", action="store_true", help="keep no audit trail, even on a public server")


def add_watermark_flag(parser: argparse.ArgumentParser) -> None:
    """`--no-watermark`, the same for the app and the CLI: the owner's switch (no request can turn the mark off)."""
    parser.add_argument("--no-watermark", action="store_true",
                        help="do not put the inaudible PerTh watermark into outputs (by default every output carries "
                             "it, so `python -m cosyvoice_ui detect FILE` can tell it came from here); /health says "
                             "whether outputs are marked")


def add_take_flags(parser: argparse.ArgumentParser) -> None:
    """`--take-retries` and `--no-take-check`, the same for the app and the CLI."""
    parser.add_argument("--take-retries", type=int, default=default_take_retries(), metavar="N",
                        help="re-render a segment whose length does not fit its text (or that repeats itself) up to "
                             "N times with a new seed (default 1, or COSYVOICE_TAKE_RETRIES; 0 = check and report "
                             "only; each retry renders that segment again: about as long again)")
    parser.add_argument("--no-take-check", action="store_true",
                        help="do not check segments for bad takes (no retries)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    return Settings(
        model_dir=args.model_dir, models_dir=args.models_dir, voices_dir=args.voices_dir, device=args.device,
        precision=args.precision, threads=args.threads, host=args.host, port=args.port, share=args.share,
        auth=_auth_pairs(args.auth, args.auth_file), api_keys=tuple(args.api_key) + env_api_keys(),
        no_auth=args.no_auth, temp_max_age_min=args.temp_max_age_min,
        results_max_age_min=args.results_max_age_min,
        idle_unload_s=args.idle_unload, max_text_chars=args.max_text_chars, concurrency=args.concurrency,
        queue_size=args.queue_size, rate_limit_per_min=args.rate_limit, max_upload_mb=args.max_upload_mb,
        blocked_words_file=args.blocked_words, engine_url=args.engine_url,
        default_voice=args.default_voice, voice_aliases_file=args.voice_aliases, mcp=args.mcp,
        projects_dir=args.projects_dir, glossary_dir=args.glossary_dir, asr_model=args.asr_model,
        take_retries=max(0, args.take_retries), check_takes=not args.no_take_check,
        allowed_origins=_origins(args.allowed_origin), max_voices=max(0, args.max_voices),
        max_glossaries=max(0, args.max_glossaries), max_projects=max(0, args.max_projects),
        require_consent=args.require_consent, audit_log=args.audit_log, no_audit_log=args.no_audit_log,
        watermark=default_watermark() and not args.no_watermark,
        extra={"output_dir": str(args.output_dir)},
    )


def main(argv: list[str] | None = None, prog: str = "app.py") -> int:
    parser = build_parser()
    parser.prog = prog
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_from_args(args)
    from ..errors import CosyVoiceError
    from .server import serve

    try:
        return serve(settings)
    except CosyVoiceError as exc:  # a bad flag value found while building the app (e.g. --voice-aliases)
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
