"""The v1 text tokenizer: whisper's multilingual byte-level BPE on `tiktoken`, 51866 ids.

CosyVoice-300M / -SFT / -Instruct tokenise text with whisper's multilingual encoding (100 languages).
Ids 0-50256 are BPE ranks read from the vendored `assets/multilingual.tiktoken.gz` (a gzip of the file
openai-whisper ships; origin and licence in `assets/NOTICE.md`). Then come the specials, in whisper's
order: <|endoftext|> 50257, <|startoftranscript|> 50258, one language tag per code of `LANGUAGE_CODES`
(50259-50358), six task/control tokens (50359-50364) and 1501 timestamps <|0.00|> ... <|30.00|>
(50365-51865). Encoding treats every special string as its single id (`allowed_special="all"`) and adds
no BOS/EOS; strings such as `<|endofprompt|>` or `[laughter]` are not in this vocabulary and are encoded
as ordinary text, as the v1 models were trained.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import logging
import threading
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import CheckpointError
from ...validation import check_characters

if TYPE_CHECKING:
    import tiktoken

log = logging.getLogger(__name__)

RANK_FILE = "multilingual.tiktoken.gz"
# sha256 of the uncompressed rank file as shipped by openai-whisper (20231117 ... 20250625).
RANK_FILE_SHA256 = "b34b360dbb493e781e479794586d661700670d65564001f23024971d1f2fa126"
N_MERGEABLE = 50257

# whisper's LANGUAGES keys in their declared order (data: the order assigns the ids 50259 + index).
LANGUAGE_CODES: tuple[str, ...] = (
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it", "id",
    "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur", "hr", "bg",
    "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn", "et", "mk", "br",
    "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si", "km", "sn", "yo", "so",
    "af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt",
    "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue",
)  # fmt: skip

_CONTROL_TOKENS = (
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nospeech|>",
    "<|notimestamps|>",
)
_N_TIMESTAMPS = 1501  # 0.00 s to 30.00 s in 0.02 s steps

# GPT-2 pre-tokenisation: contractions, letter runs, digit runs, other-symbol runs, whitespace.
_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def special_tokens() -> dict[str, int]:
    """The 1609 special strings and their ids, in whisper's order starting at 50257."""
    names = [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *(f"<|{code}|>" for code in LANGUAGE_CODES),
        *_CONTROL_TOKENS,
        *(f"<|{i * 0.02:.2f}|>" for i in range(_N_TIMESTAMPS)),
    ]
    return {name: N_MERGEABLE + i for i, name in enumerate(names)}


def _read_ranks(gz_bytes: bytes, name: str) -> dict[bytes, int]:
    """Parse the gzip-compressed rank file (one `base64(token) rank` per line) after checking its sha256."""
    try:
        raw = gzip.decompress(gz_bytes)
    except (OSError, EOFError) as exc:
        raise CheckpointError(f"tokenizer rank file {name} is not a readable gzip file ({exc})") from exc
    digest = hashlib.sha256(raw).hexdigest()
    if digest != RANK_FILE_SHA256:
        raise CheckpointError(
            f"tokenizer rank file {name} is corrupt (sha256 {digest}, expected {RANK_FILE_SHA256}); "
            "reinstall cosyvoice_ui or restore the file from the repository"
        )
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != N_MERGEABLE:
        raise CheckpointError(f"tokenizer rank file {name} has {len(ranks)} entries, expected {N_MERGEABLE}")
    return ranks


def _build_encoding(rank_file: Path | None) -> tiktoken.Encoding:
    import tiktoken  # deferred: nothing heavy at import time

    source = rank_file or resources.files(__package__) / "assets" / RANK_FILE
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise CheckpointError(
            f"tokenizer rank file {source.name} cannot be read ({exc}); reinstall cosyvoice_ui"
        ) from exc
    specials = special_tokens()
    encoding = tiktoken.Encoding(
        name="whisper-multilingual",
        explicit_n_vocab=N_MERGEABLE + len(specials),
        pat_str=_PATTERN,
        mergeable_ranks=_read_ranks(data, source.name),
        special_tokens=specials,
    )
    log.debug("loaded the whisper multilingual tokenizer (%d ids)", encoding.n_vocab)
    return encoding


class WhisperTokenizer:
    """Encodes and decodes v1 text ids (whisper multilingual, 100 languages, 51866 ids).

    Does: text -> ids with special strings matched atomically, ids -> text, language-tag lookup.
    Does not: normalise or split text (see `text.py`), add BOS/EOS, or know about v2/v3's Qwen vocabulary.
    The rank file is read and checked on first use (not at construction or import); thread-safe.
    """

    def __init__(self, rank_file: Path | None = None) -> None:
        """`rank_file`: a gzip-compressed rank file to use instead of the vendored one (tests)."""
        self._rank_file = rank_file
        self._encoding: tiktoken.Encoding | None = None
        self._lock = threading.Lock()

    def _load(self) -> tiktoken.Encoding:
        if self._encoding is None:
            with self._lock:
                if self._encoding is None:
                    self._encoding = _build_encoding(self._rank_file)
        return self._encoding

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special strings such as `<|en|>` become their single id.

        Raises InvalidRequest for a lone surrogate (tiktoken would silently read it as U+FFFD)."""
        check_characters(text)
        return self._load().encode(text, allowed_special="all")

    def decode(self, ids: list[int]) -> str:
        """Text of `ids` (specials included verbatim; invalid UTF-8 replaced)."""
        return self._load().decode(list(ids))

    def count(self, text: str) -> int:
        """Number of ids `encode(text)` gives: the length measure of English sentence splitting."""
        return len(self.encode(text))

    @property
    def n_vocab(self) -> int:
        """51866 = the v1 `text_token_size`."""
        return self._load().n_vocab

    def language_token(self, code: str) -> int:
        """Id of the language tag `<|code|>` (e.g. "en" -> 50259, "yue" -> 50358)."""
        if code not in LANGUAGE_CODES:
            raise ValueError(f"unknown language code {code!r}; choose one of: {', '.join(LANGUAGE_CODES)}")
        return N_MERGEABLE + 2 + LANGUAGE_CODES.index(code)
