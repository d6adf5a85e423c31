"""A small Qwen2-style byte-level BPE vocabulary in the official `CosyVoice-BlankEN/` file layout, for tests.

No Qwen tokenizer files ship with the golden fixtures (or this repository), so tests train a byte-level BPE on a
short corpus with the `tokenizers` trainer, under Qwen2's own pre-tokenisation, and pad the vocabulary with
unreachable filler entries up to the official 151643 BPE entries. The three Qwen specials then sit at
151643-151645, as in the real `tokenizer_config.json`, so every CosyVoice special gets its official id.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import Tokenizer

QWEN_BPE_ENTRIES = 151643  # BPE entries of the official vocabulary (ids 0-151642)

DEFAULT_CORPUS = (
    "Hello world, this is a tiny byte-level tokenizer for CosyVoice tests.",
    "The quick brown fox jumps over the lazy dog; then it sleeps.",
    "收到好友从远方寄来的生日礼物，那份意外的惊喜让我心中充满了快乐。",
    "希望你以后能够做的比我还好呦。高管也通过电话、短信、微信等方式对报道予好评。",
    "You are a helpful assistant. Please say a sentence as loudly as possible.",
    "Numbers like 2024 and 3.14 are split one digit per token; don't they?",
)


def _pipeline(vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer

    from ..cosyvoice.frontend.qwen_tokenizer import QWEN_SPLIT

    tokenizer = Tokenizer(BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                         show_progress=False, special_tokens=[])
    return tokenizer, trainer


def write_qwen_vocab(folder: str | Path, corpus: Iterable[str] = DEFAULT_CORPUS, *, trained_size: int = 700,
                     entries: int = QWEN_BPE_ENTRIES, layout: str = "vocab") -> Path:
    """Write a byte-level BPE tokenizer to `folder` and return it.

    layout "vocab": `vocab.json` + `merges.txt` + `tokenizer_config.json` (how the official folders ship it);
    "json": a single `tokenizer.json` holding the same pipeline and the three Qwen specials.
    """
    from tokenizers import AddedToken
    from tokenizers.models import BPE

    from ..cosyvoice.frontend.qwen_tokenizer import QWEN_SPECIALS

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer, trainer = _pipeline(trained_size)
    tokenizer.train_from_iterator(list(corpus), trainer=trainer)
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer.model.save(scratch)
        vocab = json.loads((Path(scratch) / "vocab.json").read_text(encoding="utf-8"))
        merges = (Path(scratch) / "merges.txt").read_text(encoding="utf-8")
    if len(vocab) > entries:
        raise ValueError(f"the trained vocabulary has {len(vocab)} entries, more than {entries}")
    # Unreachable fillers (no merge builds them) bring the vocabulary to the official size.
    for i in range(len(vocab), entries):
        vocab[f"\u00ffpad{i}\u00ff"] = i
    if layout == "vocab":
        (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        (folder / "merges.txt").write_text(merges, encoding="utf-8")
        decoder = {str(entries + i): {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                                      "single_word": False, "special": True}
                   for i, name in enumerate(QWEN_SPECIALS)}
        config = {"added_tokens_decoder": decoder, "eos_token": QWEN_SPECIALS[0], "pad_token": QWEN_SPECIALS[0],
                  "bos_token": None, "tokenizer_class": "Qwen2Tokenizer", "model_max_length": 32768}
        (folder / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1),
                                                      encoding="utf-8")
    elif layout == "json":
        with tempfile.TemporaryDirectory() as scratch:
            (Path(scratch) / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
            (Path(scratch) / "merges.txt").write_text(merges, encoding="utf-8")
            full = BPE.from_file(str(Path(scratch) / "vocab.json"), str(Path(scratch) / "merges.txt"))
        tokenizer.model = full
        for name in QWEN_SPECIALS:
            tokenizer.add_special_tokens([AddedToken(name, special=True, normalized=False)])
        tokenizer.save(str(folder / "tokenizer.json"))
    else:
        raise ValueError(f"unknown layout {layout!r} (vocab or json)")
    return folder


def trained_vocabulary(corpus: Iterable[str] = DEFAULT_CORPUS, trained_size: int = 700) -> Tokenizer:
    """The trained tokenizer alone (no fillers, no specials): a reference for plain-text ids."""
    tokenizer, trainer = _pipeline(trained_size)
    tokenizer.train_from_iterator(list(corpus), trainer=trainer)
    return tokenizer
