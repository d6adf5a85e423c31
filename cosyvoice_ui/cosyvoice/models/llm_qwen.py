"""The Qwen2-based speech-token LLMs: `Qwen2LM` and `CosyVoice3LM` (text ids → 25 Hz speech tokens).

Legend: Tt text ids to speak, Tp prompt-text ids, Ts prompt speech tokens, L assembled length, D width,
S = speech_token_size (ordinary speech tokens are 0..S-1), V the decoder vocabulary (S + specials).

Sequence fed to the Qwen2 backbone (all [1, *, D]; no speaker slot: the embedding is ignored):
    [SOS] [embed_tokens(prompt_text ⧺ text)] [TASK] [speech_embedding(prompt speech)]
The two classes differ only in where SOS/TASK live and how many special rows follow the speech tokens:
* `Qwen2LM`: SOS/TASK are rows 0/1 of `llm_embedding`; V = S + 3 (EOS S, S+1 unused, FILL S+2), decoder bias.
* `CosyVoice3LM`: SOS/TASK are rows S/S+2 of `speech_embedding` (EOS S+1, FILL S+3); V = S + 200, no bias.
Both stop on any pick >= S. While step < min_len index S is masked (upstream's rule, kept as is: it is
EOS in `Qwen2LM` but SOS in `CosyVoice3LM`, so there the real EOS can end a decode early). The layout's
assembly, the decoding loop and teacher forcing are `speech_lm.SpeechTokenLM`'s, shared with v1.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import nn

from ..config import QwenLMConfig
from .linears import column_major_linears
from .qwen2 import Qwen2Encoder
from .speech_lm import SpeechTokenLM


def drop_long_silences(tokens: Iterable[int], silent_tokens: frozenset[int], max_run: int) -> Iterator[int]:
    """Pass `tokens` through, dropping each silent token that extends a run of silent tokens beyond
    `max_run` (a non-silent token ends the run). Lazy, so it can sit between the LLM and a stream."""
    run = 0
    for token in tokens:
        if token in silent_tokens:
            run += 1
            if run > max_run:
                continue
        else:
            run = 0
        yield token


class _QwenSpeechLM(SpeechTokenLM):
    """What both Qwen-based LLMs share: the Qwen2 backbone (text embedded by its `embed_tokens`, no speaker slot)
    and a decoder vocabulary of S + `N_SPECIAL`. Decoding is `SpeechTokenLM`'s.

    Attribute names follow upstream so `llm.pt` loads strictly. Subclasses say where SOS/TASK come from.
    """

    N_SPECIAL = 0  # special ids after the speech tokens in the decoder vocabulary
    DECODER_BIAS = True
    # Never run at inference (the speech head is llm_decoder); tied to embed_tokens in every release.
    KEEP_LINEARS = ("llm.model.lm_head",)

    def __init__(self, cfg: QwenLMConfig) -> None:
        super().__init__(cfg)
        self.llm = Qwen2Encoder(cfg.qwen)
        self.llm_decoder = nn.Linear(cfg.llm_output_size, self.decoder_vocab, bias=self.DECODER_BIAS)
        self.speech_embedding = nn.Embedding(self.decoder_vocab, cfg.llm_input_size)

    @property
    def decoder_vocab(self) -> int:
        return self.speech_token_size + self.N_SPECIAL

    @property
    def stop_token_ids(self) -> range:
        """Every special id stops a decode."""
        return range(self.speech_token_size, self.decoder_vocab)

    def fuse_qkv(self) -> int:
        """Fuse the q/k/v projections of every backbone layer into one linear each; returns how many
        layers were fused now. Same numbers up to summation order."""
        return self.llm.fuse_qkv()

    def column_major_linears(self) -> int:
        """Store the backbone's and the speech head's linear weights column-major (same values, shapes and keys;
        the unused `lm_head` is left as it is); returns how many."""
        return column_major_linears(self.llm.model.model) + column_major_linears(self.llm_decoder)

    def encode_text(self, text_ids: torch.Tensor) -> torch.Tensor:
        """[1, T] ids → [1, T, D]: the backbone's own token embedding (no separate text encoder)."""
        return self.llm.embed_tokens(self._ids(text_ids, "text ids"))


class Qwen2LM(_QwenSpeechLM):
    """The speech LLM with SOS/TASK in a 2-row `llm_embedding` and 3 special ids (EOS, unused, FILL).

    Constructor: `Qwen2LM(cfg: QwenLMConfig)`.
    """

    N_SPECIAL = 3
    DECODER_BIAS = True

    def __init__(self, cfg: QwenLMConfig) -> None:
        super().__init__(cfg)
        self.llm_embedding = nn.Embedding(2, cfg.llm_input_size)  # SOS, TASK (the base's default rows)


# FSQ codes of silence and breath; long runs of them are cut before the flow (upstream `llm_job`).
DEFAULT_SILENT_TOKENS = frozenset({1, 2, 28, 29, 55, 248, 494, 2241, 2242, 2322, 2323})


class CosyVoice3LM(_QwenSpeechLM):
    """The speech LLM whose specials live in a (S + 200)-row speech table: SOS S, EOS S+1, TASK S+2,
    FILL S+3; the decoder has no bias.

    Constructor: `CosyVoice3LM(cfg: QwenLMConfig, endofprompt_id=151646, silent_tokens=DEFAULT_SILENT_TOKENS,
    max_silent_run=5)`. `endofprompt_id` must occur in prompt_text ⧺ text (upstream asserts it; None
    skips the check); `tokens_for_flow` drops silent tokens beyond `max_silent_run` in a row.
    """

    N_SPECIAL = 200
    DECODER_BIAS = False
    SOS_OFFSET = 0  # rows S + offset of speech_embedding
    EOS_OFFSET = 1
    TASK_OFFSET = 2

    def __init__(
        self,
        cfg: QwenLMConfig,
        endofprompt_id: int | None = 151646,
        silent_tokens: frozenset[int] = DEFAULT_SILENT_TOKENS,
        max_silent_run: int = 5,
    ) -> None:
        super().__init__(cfg)
        self.endofprompt_id = endofprompt_id
        self.silent_tokens = frozenset(silent_tokens)
        self.max_silent_run = max_silent_run

    @property
    def eos(self) -> int:
        return self.speech_token_size + self.EOS_OFFSET

    def sos_task(self) -> tuple[torch.Tensor, torch.Tensor]:
        table = self.speech_embedding.weight
        s = self.speech_token_size
        return table[s + self.SOS_OFFSET], table[s + self.TASK_OFFSET]

    def check_text(self, ids: torch.Tensor) -> None:
        if self.endofprompt_id is not None and not bool((ids == self.endofprompt_id).any()):
            raise ValueError(f"the text ids (prompt text + text) must contain <|endofprompt|> "
                             f"(id {self.endofprompt_id}); the recipe adds it")

    def tokens_for_flow(self, tokens: Iterable[int]) -> Iterator[int]:
        return drop_long_silences(tokens, self.silent_tokens, self.max_silent_run)
