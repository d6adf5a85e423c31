"""Runtime settings: built once from argv/env in app.py or cli.py, then passed down explicitly."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

DEFAULT_MODELS_DIR = Path("pretrained_models")
# One retry: in benchmarks/bad_takes.py every caught bad take (187 of 187) was good after the first retry and none
# needed a second, while each retry costs about one more render of its segment (README, "bad-take bands").
DEFAULT_TAKE_RETRIES = 1
# The audit trail of a public server when --audit-log names none (relative to the working folder, like voices/,
# outputs/ and projects/): serving/audit.py
DEFAULT_AUDIT_LOG = Path("logs") / "audit.jsonl"


def default_take_retries() -> int:
    """Bad-take retries per segment when no flag says: `COSYVOICE_TAKE_RETRIES` if it is a whole number >= 0,
    else 1. (The test suite sets 0: its tiny random models are never the right length, and re-rendering their
    takes would only double the suite's time; the tests of retrying set their own count.)"""
    value = os.environ.get("COSYVOICE_TAKE_RETRIES", "").strip()
    return int(value) if value.isdigit() else DEFAULT_TAKE_RETRIES


def default_watermark() -> bool:
    """Whether outputs are watermarked when no flag says: yes, unless COSYVOICE_WATERMARK is 0, off, false or no
    (an owner's switch like `--no-watermark`; the test suite sets it off except in the tests of the mark, since
    many tests compare rendered samples with the engine's own)."""
    return os.environ.get("COSYVOICE_WATERMARK", "").strip().lower() not in ("0", "off", "false", "no")


@dataclass(frozen=True)
class Settings:
    """Everything a running instance needs to know that is not a model hyperparameter."""

    model_dir: Path | None = None  # None: first model folder under models_dir, else the offline default
    models_dir: Path = DEFAULT_MODELS_DIR
    voices_dir: Path = Path("voices")  # saved voices (prompt features computed once)
    device: str = "auto"  # auto | cpu | cuda
    # auto (fast on a CPU, stock on a GPU; resolved at load) | stock (upstream's numbers) | fast | extra-fast
    precision: str = "auto"
    threads: int | None = None  # torch intra-op threads; None = torch's default
    host: str = "127.0.0.1"
    port: int = 7860
    share: bool = False
    auth: tuple[tuple[str, str], ...] = ()
    api_keys: tuple[str, ...] = ()
    no_auth: bool = False  # --no-auth: serve a public bind or share link without the generated login and key
    idle_unload_s: float = 600.0  # 0 = never
    max_text_chars: int = 5000
    concurrency: int = 1  # jobs running at once per model
    queue_size: int = 32
    rate_limit_per_min: int | None = None  # per client, REST API; None: 60 when public, off on loopback
    temp_max_age_min: float = 60.0  # Gradio's temp files (uploads, copies) are deleted after this (0 = keep)
    # Our results in --output-dir are the user's work (the history tab plays them): kept unless asked (0 = keep)
    results_max_age_min: float = 0.0
    max_upload_mb: float = 20.0
    blocked_words_file: Path | None = None
    engine_url: str | None = None  # thin-client mode: send synthesis to this remote instance
    cache_entries: int = 64  # recent results kept for instant repeats
    default_voice: str | None = None  # --default-voice: preset or saved voice used when a request names none
    voice_aliases_file: Path | None = None  # --voice-aliases: JSON {"alloy": "<voice>", ...} for OpenAI clients
    mcp: bool = False  # --mcp: expose synthesis and voices as MCP tools (Gradio's MCP server)
    projects_dir: Path = Path("projects")  # script projects and audiobook jobs (one folder each)
    glossary_dir: Path = Path("glossaries")  # saved pronunciation glossaries (one JSON file each)
    asr_model: str = "auto"  # transcription: "auto" (a downloaded Whisper, else pocketsphinx), or a model name
    take_retries: int = field(default_factory=default_take_retries)  # bad-take retries per segment (0 = check only)
    check_takes: bool = True  # --no-take-check: neither check nor retry takes
    # Every output carries the PerTh watermark (serving/watermarking.py); only the owner turns it off
    # (--no-watermark): no request field reaches this
    watermark: bool = field(default_factory=default_watermark)
    # --allowed-origin: other web origins whose pages may use this server (CORS with credentials, cross-site POST)
    allowed_origins: tuple[str, ...] = ()
    # What the stores keep at most (a clear 507 at the cap; 0 = no cap)
    max_voices: int = 1000
    max_glossaries: int = 1000
    max_projects: int = 1000
    # Consent and the audit trail on shared servers (serving/consent.py, serving/audit.py)
    require_consent: bool | None = None  # --require-consent / --no-require-consent; None: on when public
    audit_log: Path | None = None  # --audit-log FILE; None: DEFAULT_AUDIT_LOG when public, none on loopback
    no_audit_log: bool = False  # --no-audit-log: no trail, even when public
    extra: dict = field(default_factory=dict)

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)

    def load_options(self) -> LoadOptions:
        return LoadOptions(device=self.device, precision=self.precision, max_text_chars=self.max_text_chars,
                           threads=self.threads, voices_dir=self.voices_dir, batch_width=self.concurrency)

    @property
    def is_public(self) -> bool:
        """True when reachable beyond this machine: a shared link or a non-loopback bind."""
        return self.share or self.host not in ("127.0.0.1", "localhost", "::1")

    @property
    def audit_path(self) -> Path | None:
        """Where the audit trail is written: `--audit-log`, else DEFAULT_AUDIT_LOG on a public server (None: none)."""
        if self.no_audit_log:
            return None
        if self.audit_log is not None:
            return Path(self.audit_log)
        return DEFAULT_AUDIT_LOG if self.is_public else None


@dataclass(frozen=True)
class LoadOptions:
    """How a backend loads a model; the manager holds one and replaces it (never mutates it) when the UI's
    fast-mode switch changes the precision."""

    device: str = "auto"  # auto | cpu | cuda
    precision: str = "auto"  # auto | stock | fast | extra-fast (`ModelManager.load_options` shows auto resolved)
    max_text_chars: int = 5000
    threads: int | None = None  # torch intra-op threads of the ONNX frontends; None = torch's
    voices_dir: Path | None = None  # where the offline voice keeps its match cache
    batch_width: int = 1  # concurrent jobs whose LLM steps run together (the server's --concurrency)

    def with_(self, **changes: object) -> LoadOptions:
        return replace(self, **changes)


def env_api_keys() -> tuple[str, ...]:
    """API keys from COSYVOICE_API_KEYS (comma separated)."""
    raw = os.environ.get("COSYVOICE_API_KEYS", "")
    return tuple(k.strip() for k in raw.split(",") if k.strip())
