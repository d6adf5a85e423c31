"""The v2/v3 text tokenizer: Qwen2's byte-level BPE (the model folder's `CosyVoice-BlankEN/`) plus CosyVoice's
added special tokens (cosyvoice-models.md §1.4, §2.3), on the `tokenizers` library (no `transformers`).

The folder holds either `tokenizer.json` (a whole `tokenizers` pipeline) or, as the official CosyVoice2 /
Fun-CosyVoice3 folders ship it, `vocab.json` + `merges.txt` (+ `tokenizer_config.json` with the three Qwen
specials at ids 151643-151645). From vocab + merges we build the pipeline Qwen2's own fast tokenizer has:
NFC normalisation, Qwen2's split regex (digits one per token), byte-level mapping without a prefix space,
BPE without dropout or unknown token, byte-level decoding. No BOS/EOS is added.

Then the CosyVoice specials are added in list order, as upstream's `add_special_tokens` does: a string the
vocabulary already knows keeps its id, a new one gets the next free id. With the official vocabulary (151643
BPE entries + 3 specials) that gives `<|endofprompt|>` 151646 ... `[mn]` 151662 (151663 ids) for the
`cosyvoice2` list and additionally `<|endofsystem|>` 151663 and 260 phoneme tokens 151664-151923 (151924 ids)
for the `cosyvoice3` list. Which list a model uses is the `version` argument of its yaml's `get_tokenizer`
entry (`added_special_tokens`), not a family check. Special strings in the text are matched atomically on the
raw text (before NFC), so a typed `<|endofprompt|>` or `[j][ǐ]` becomes those single ids.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import CheckpointError
from ...validation import check_characters

if TYPE_CHECKING:
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)

QWEN_FOLDER = "CosyVoice-BlankEN"
END_OF_PROMPT = "<|endofprompt|>"
END_OF_TEXT = "<|endoftext|>"

# Qwen2's pre-tokenisation: contractions, letter runs (with one leading non-letter), single digits, symbol runs
# (with trailing newlines), newline runs, trailing whitespace, other whitespace.
QWEN_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
              r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")

# The specials Qwen2's own tokenizer config declares (ids 151643-151645 in the official vocabulary).
QWEN_SPECIALS = (END_OF_TEXT, "<|im_start|>", "<|im_end|>")

# Upstream `CosyVoice2Tokenizer`: eos = pad = <|endoftext|>, then the additional specials, in this order.
_COSYVOICE2_ADDITIONAL = (
    "<|im_start|>", "<|im_end|>", END_OF_PROMPT, "[breath]", "<strong>", "</strong>", "[noise]", "[laughter]",
    "[cough]", "[clucking]", "[accent]", "[quick_breath]", "<laughter>", "</laughter>", "[hissing]", "[sigh]",
    "[vocalized-noise]", "[lipsmack]", "[mn]",
)
END_OF_SYSTEM = "<|endofsystem|>"
# CMU ARPAbet phones (vowels with stress 0/1/2), in upstream `CosyVoice3Tokenizer` order: 84 tokens.
ARPABET = tuple(f"[{p}]" for p in (
    "AA AA0 AA1 AA2 AE AE0 AE1 AE2 AH AH0 AH1 AH2 AO AO0 AO1 AO2 AW AW0 AW1 AW2 AY AY0 AY1 AY2 B CH D DH EH EH0 "
    "EH1 EH2 ER ER0 ER1 ER2 EY EY0 EY1 EY2 F G HH IH IH0 IH1 IH2 IY IY0 IY1 IY2 JH K L M N NG OW OW0 OW1 OW2 OY "
    "OY0 OY1 OY2 P R S SH T TH UH UH0 UH1 UH2 UW UW0 UW1 UW2 V W Y Z ZH").split())
# Mandarin pinyin initials and toned finals, in upstream `CosyVoice3Tokenizer` order: 176 tokens.
PINYIN = tuple(f"[{p}]" for p in (
    "a ai an ang ao b c ch d e ei en eng f g h i ian in ing iu ià iàn iàng iào iá ián iáng iáo iè ié iòng ióng "
    "iù iú iā iān iāng iāo iē iě iōng iū iǎ iǎn iǎng iǎo iǒng iǔ j k l m n o ong ou p q r s sh t u uang ue un uo "
    "uà uài uàn uàng uá uái uán uáng uè ué uì uí uò uó uā uāi uān uāng uē uě uī uō uǎ uǎi uǎn uǎng uǐ uǒ vè w x "
    "y z zh à ài àn àng ào á ái án áng áo è èi èn èng èr é éi én éng ér ì ìn ìng í ín íng ò òng òu ó óng óu ù "
    "ùn ú ún ā āi ān āng āo ē ēi ēn ēng ě ěi ěn ěng ěr ī īn īng ō ōng ōu ū ūn ǎ ǎi ǎn ǎng ǎo ǐ ǐn ǐng ǒ ǒng "
    "ǒu ǔ ǔn ǘ ǚ ǜ").split())

# The special strings each upstream tokenizer version adds, in the order that assigns their ids. Keys are the
# values of upstream `get_qwen_tokenizer(version=...)`, which a model's yaml names.
ADDED_SPECIALS: dict[str, tuple[str, ...]] = {
    "cosyvoice2": (END_OF_TEXT, *_COSYVOICE2_ADDITIONAL),
    "cosyvoice3": (END_OF_TEXT, *_COSYVOICE2_ADDITIONAL, END_OF_SYSTEM, *ARPABET, *PINYIN),
}
DEFAULT_VERSION = "cosyvoice2"  # upstream's default when the yaml names none


def added_special_tokens(version: str | None) -> tuple[str, ...]:
    """The specials of upstream tokenizer `version` (the yaml's `get_tokenizer.version`; None = the default)."""
    key = DEFAULT_VERSION if version is None else str(version)
    if key not in ADDED_SPECIALS:
        raise CheckpointError(f"unknown text tokenizer version {key!r}; known: {', '.join(ADDED_SPECIALS)}")
    return ADDED_SPECIALS[key]


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path.parent.name}/{path.name} cannot be read as JSON ({exc})") from exc


def _config_specials(folder: Path) -> list[tuple[int, str]]:
    """(id, content) of the added tokens `tokenizer_config.json` declares, by id (none without the file)."""
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return []
    data = _read_json(path)
    decoder = data.get("added_tokens_decoder", {}) if isinstance(data, dict) else {}
    found = []
    for key, entry in decoder.items():
        content = entry.get("content") if isinstance(entry, dict) else None
        if isinstance(content, str) and str(key).isdigit():
            found.append((int(key), content))
    return sorted(found)


def _from_vocab_and_merges(folder: Path) -> Tokenizer:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    vocab_path, merges_path = folder / "vocab.json", folder / "merges.txt"
    for path in (vocab_path, merges_path):
        if not path.is_file():
            raise CheckpointError(f"{folder.name}/ has neither tokenizer.json nor {path.name}; re-download the model")
    try:
        vocab, merges = BPE.read_file(str(vocab_path), str(merges_path))
    except Exception as exc:  # the Rust reader raises plain Exceptions
        raise CheckpointError(f"{folder.name}/vocab.json or merges.txt is not a BPE vocabulary ({exc})") from exc
    tokenizer = Tokenizer(BPE(vocab, merges, dropout=None, unk_token=None, continuing_subword_prefix="",
                              end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    for token_id, content in _config_specials(folder):
        tokenizer.add_special_tokens([AddedToken(content, special=True, normalized=False)])
        if tokenizer.token_to_id(content) != token_id:
            raise CheckpointError(f"{folder.name}/tokenizer_config.json puts {content} at id {token_id}, but the "
                                  f"vocabulary gives it {tokenizer.token_to_id(content)}")
    return tokenizer


def build_tokenizer(folder: Path, added: Sequence[str]) -> Tokenizer:
    """The Qwen2 pipeline of `folder` (tokenizer.json, else vocab.json + merges.txt) with `added` specials."""
    from tokenizers import AddedToken, Tokenizer

    if not folder.is_dir():
        raise CheckpointError(f"the text tokenizer folder {folder.name}/ is missing; re-download the model")
    if (folder / "tokenizer.json").is_file():
        try:
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as exc:  # the Rust reader raises plain Exceptions
            raise CheckpointError(f"{folder.name}/tokenizer.json cannot be read ({exc})") from exc
    else:
        tokenizer = _from_vocab_and_merges(folder)
    # One at a time, in order: a known string keeps its id, a new one takes the next id (upstream's rule).
    for content in added:
        tokenizer.add_special_tokens([AddedToken(content, special=True, normalized=False)])
    return tokenizer


class QwenTokenizer:
    """Encodes and decodes v2/v3 text ids (Qwen2 byte-level BPE + CosyVoice specials).

    Does: text -> ids with every special string (`<|endofprompt|>`, `[breath]`, `<strong>`, `[j]`, `[AA1]`, ...)
    matched atomically, ids -> text (specials skipped, as upstream's `skip_special_tokens=True`), id lookup.
    Does not: normalise or split text (`text.py`), add BOS/EOS, or decide where `<|endofprompt|>` goes
    (`recipes.py`). Files are read on first use, not at construction; thread-safe.
    """

    def __init__(self, folder: str | Path, added_specials: Sequence[str] = ADDED_SPECIALS[DEFAULT_VERSION],
                 skip_special_tokens: bool = True) -> None:
        """`folder`: the `CosyVoice-BlankEN/` directory; `added_specials`: `added_special_tokens(version)`."""
        self.folder = Path(folder)
        self.added_specials = tuple(added_specials)
        self.skip_special_tokens = skip_special_tokens
        self._tokenizer: Tokenizer | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_model(cls, model_dir: str | Path, tokenizer_args: dict) -> QwenTokenizer:
        """The tokenizer of a model folder, from its yaml's `get_tokenizer` arguments (`ModelConfig.tokenizer`)."""
        return cls(Path(model_dir) / QWEN_FOLDER, added_special_tokens(tokenizer_args.get("version")),
                   bool(tokenizer_args.get("skip_special_tokens", True)))

    def _load(self) -> Tokenizer:
        if self._tokenizer is None:
            with self._lock:
                if self._tokenizer is None:
                    tokenizer = build_tokenizer(self.folder, self.added_specials)
                    log.debug("loaded the Qwen2 tokenizer of %s (%d ids)", self.folder.name,
                              tokenizer.get_vocab_size(with_added_tokens=True))
                    self._tokenizer = tokenizer
        return self._tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special strings become their single id; no BOS/EOS.

        Raises InvalidRequest for a lone surrogate (the Rust tokenizer would fail with a bare TypeError)."""
        check_characters(text)
        return self._load().encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`; special tokens are dropped unless the tokenizer was built with skip_special_tokens=False."""
        return self._load().decode([int(i) for i in ids], skip_special_tokens=self.skip_special_tokens)

    def count(self, text: str) -> int:
        """Number of ids `encode(text)` gives: the length measure of English sentence splitting."""
        return len(self.encode(text))

    @property
    def n_vocab(self) -> int:
        """Ids in use, specials included (151663 with the cosyvoice2 list, 151924 with cosyvoice3's)."""
        return self._load().get_vocab_size(with_added_tokens=True)

    def token_id(self, token: str) -> int | None:
        """The id of one token string (a special or a byte-level BPE entry); None when unknown."""
        return self._load().token_to_id(token)

    def special_ids(self) -> dict[str, int]:
        """Every added special string and its id (Qwen's own three and the CosyVoice list)."""
        tokenizer = self._load()
        names = dict.fromkeys((*QWEN_SPECIALS, *self.added_specials))
        return {name: tokenizer.token_to_id(name) for name in names if tokenizer.token_to_id(name) is not None}

    @property
    def end_of_prompt_id(self) -> int:
        """The id of `<|endofprompt|>` (151646 with the official vocabulary)."""
        token_id = self.token_id(END_OF_PROMPT)
        if token_id is None:
            raise CheckpointError(f"{self.folder.name}/ tokenizer has no {END_OF_PROMPT} token")
        return token_id
