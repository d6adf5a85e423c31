"""The Qwen2-based speech-token LLMs: `Qwen2LM` and `CosyVoice3LM` (text ids → 25 Hz speech tokens).

Legend: Tt text ids to speak, Tp prompt-text ids, Ts prompt speech tokens, L assembled length, D width,
S = speech_token_size (ordinary speech tokens are 0..S-1), V the decoder vocabulary (S + specials).

Sequence fed to the Qwen2 backbone (all [1, *, D]; no speaker slot: the embedding is ignored):
    [SOS] [embed_tokens(prompt_text ⧺ text)] [TASK] [speech_embedding(prompt speech)]
The two classes differ only in where SOS/TASK live and how many special rows follow the speech tokens:
* `Qwen2LM`: SOS/TASK are rows 0/1 of `llm_embedding`; V = S + 3 (EOS S, S+1 unused, FILL S+2), decoder bias.
* `CosyVoice3LM`: SOS/TASK are rows S/S+2 of `speech_embedding` (EOS S+1, FILL S+3); V = S + 200, no bias.
Both stop on any pick >= S. While step < min_len index S is masked (upstream's rule, kept as is: it is
EOS in `Qwen2LM` but SOS in `CosyVoice3LM`, so there the real EOS can end a decode early).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import torch
from torch import nn

from ..config import QwenLMConfig
from .linears import column_major_linears, pack_linears, quantize_linears_int4, quantize_linears_int8
from .qwen2 import Qwen2Encoder
from .sampling import Sampler

log = logging.getLogger(__name__)


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


class _QwenSpeechLM(nn.Module):
    """What both Qwen-based LLMs share: layout, KV-cached decoding, teacher forcing, inference layouts.

    Does not: tokenize text, extract prompt tokens, batch requests or choose the sampler (passed in).
    Attribute names follow upstream so `llm.pt` loads strictly. Subclasses say where SOS/TASK come from.
    """

    N_SPECIAL = 0  # special ids after the speech tokens in the decoder vocabulary
    DECODER_BIAS = True
    # Never run at inference (the speech head is llm_decoder); tied to embed_tokens in every release.
    UNUSED_LINEARS = ("llm.model.lm_head",)

    def __init__(self, cfg: QwenLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.speech_token_size = cfg.speech_token_size
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

    @property
    def min_len_masked_id(self) -> int:
        """The index upstream masks while step < min_len (S in both classes; see the module docstring)."""
        return self.speech_token_size

    def _sos_task(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def check_text(self, ids: torch.Tensor) -> None:
        """Raise ValueError when prompt_text ⧺ text [1, Tp+Tt] cannot be decoded (nothing by default)."""

    def tokens_for_flow(self, tokens: Iterable[int]) -> Iterator[int]:
        """The decoded tokens as the flow should receive them (unchanged by default)."""
        return iter(tokens)

    # --- inference layouts (after the strict load; the results no longer load `llm.pt`) ------------------

    def fuse_qkv(self) -> int:
        """Fuse the q/k/v projections of every backbone layer into one linear each; returns how many
        layers were fused now. Same numbers up to summation order."""
        return self.llm.fuse_qkv()

    def pack_linears(self) -> int:
        """Pre-pack the linears for oneDNN (CPU only; check `onednn_linear_works()`); returns how many."""
        return pack_linears(self, skip=self.UNUSED_LINEARS)

    def column_major_linears(self) -> int:
        """Store every linear weight column-major (same values, shapes and keys); returns how many."""
        return column_major_linears(self.llm.model.model) + column_major_linears(self.llm_decoder)

    def quantize_int8(self) -> int:
        """Int8 dynamic quantisation of the linears (CPU only; changes the numbers); returns how many."""
        return quantize_linears_int8(self, skip=self.UNUSED_LINEARS)

    def quantize_int4(self) -> tuple[int, int]:
        """4-bit grouped weights where the kernel takes the shape, int8 dynamic elsewhere (CPU only;
        changes the numbers more than int8); returns (int4, int8) counts."""
        return quantize_linears_int4(self, skip=self.UNUSED_LINEARS)

    # --- layout ------------------------------------------------------------------------------------------

    def _ids(self, ids: torch.Tensor, name: str) -> torch.Tensor:
        assert ids.dim() == 2 and ids.size(0) == 1, f"{name} should be [1, T], got {tuple(ids.shape)}"
        return ids.to(device=self.speech_embedding.weight.device, dtype=torch.long)

    def build_input(
        self,
        text: torch.Tensor,
        prompt_text: torch.Tensor,
        prompt_speech_token: torch.Tensor,
        embedding: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Assemble the LLM input.

        Args: text [1, Tt], prompt_text [1, Tp] (Tp may be 0), prompt_speech_token [1, Ts] (Ts may be 0);
        embedding is accepted for the common LLM signature and ignored (no speaker slot).
        Returns: [1, L, D] with L = 1 + Tp + Tt + 1 + Ts.
        """
        ids = torch.cat([self._ids(prompt_text, "prompt_text"), self._ids(text, "text")], dim=1)
        self.check_text(ids)
        sos, task = self._sos_task()
        text_emb = self.llm.embed_tokens(ids)
        speech = self.speech_embedding(self._ids(prompt_speech_token, "prompt_speech_token"))
        return torch.cat([sos.reshape(1, 1, -1), text_emb, task.reshape(1, 1, -1), speech], dim=1)

    def length_limits(self, n_text: int) -> tuple[int, int]:
        """(min_len, max_len) in speech tokens for Tt text ids (prompt text not counted)."""
        return int(n_text * self.cfg.min_token_text_ratio), int(n_text * self.cfg.max_token_text_ratio)

    def _next_logp(self, hidden: torch.Tensor) -> torch.Tensor:
        """[1, T, D] → [V] float32 log-probabilities after the last position, on the CPU (the sampler's
        generator is a CPU one, so a seed gives the same tokens on any device)."""
        # [1, D] rather than [D]: int8 dynamic-quantised linears need a batch axis.
        return self.llm_decoder(hidden[:, -1])[0].float().log_softmax(dim=-1).cpu()

    # --- decoding ----------------------------------------------------------------------------------------

    def inference(
        self,
        text: torch.Tensor,
        prompt_text: torch.Tensor,
        prompt_speech_token: torch.Tensor,
        embedding: torch.Tensor | None,
        sampler: Sampler,
        generator: torch.Generator | None = None,
        max_len: int | None = None,
        min_len: int | None = None,
        ignore_eos: bool = False,
    ) -> Iterator[int]:
        """Decode speech tokens one at a time (ids 0..S-1; the stopping id is never yielded).

        Args: as `build_input`, plus
            sampler: picks a token from [V] log-probs (e.g. `RasSampler`, `greedy`).
            generator: a CPU `torch.Generator` for the sampler; None makes a freshly seeded one.
            max_len / min_len: override `length_limits(Tt)` (20x / 2x the text ids).
            ignore_eos: mask every stop id at every step, so exactly max_len tokens come out (benchmarks).
        Index S is masked (-inf) while step < min_len; decoding stops when the pick is a stop id or after
        max_len tokens. The iterator is lazy: stop iterating (or `close()` it) to stop decoding early.
        """
        if generator is None:
            generator = torch.Generator()
            generator.seed()  # non-deterministic, and leaves the global RNG alone
        if generator.device.type != "cpu":
            raise ValueError(f"the sampler runs on the CPU; pass a CPU torch.Generator, not {generator.device}")
        # Checked eagerly: the decoding generator below only runs when iterated.
        self.check_text(torch.cat([self._ids(prompt_text, "prompt_text"), self._ids(text, "text")], dim=1))
        default_min, default_max = self.length_limits(text.size(1))
        min_len = default_min if min_len is None else min_len
        max_len = default_max if max_len is None else max_len
        return self._decode(text, prompt_text, prompt_speech_token, sampler, generator, min_len, max_len, ignore_eos)

    @torch.inference_mode()
    def _decode(
        self,
        text: torch.Tensor,
        prompt_text: torch.Tensor,
        prompt_speech_token: torch.Tensor,
        sampler: Sampler,
        generator: torch.Generator,
        min_len: int,
        max_len: int,
        ignore_eos: bool,
    ) -> Iterator[int]:
        x = self.build_input(text, prompt_text, prompt_speech_token)
        log.debug("llm prefix %d positions, min_len %d, max_len %d", x.size(1), min_len, max_len)
        # KV buffers sized once for the whole decode; pages are touched only as they are used.
        cache = self.llm.new_cache(reserve=x.size(1) + max_len)
        stop = self.speech_token_size
        decoded: list[int] = []
        for step in range(max_len):
            logp = self._next_logp(self.llm.forward_step(x, cache))
            if ignore_eos:
                logp[stop:] = float("-inf")
            elif step < min_len:
                logp[self.min_len_masked_id] = float("-inf")
            token = sampler(logp, decoded, generator)
            if token >= stop:
                log.debug("llm stopped on %d after %d tokens", token, step)
                break
            assert token >= 0, f"sampler returned {token}"
            yield token
            decoded.append(token)
            x = self.speech_embedding.weight[token].reshape(1, 1, -1)

    @torch.inference_mode()
    def teacher_forced_logp(
        self,
        text: torch.Tensor,
        prompt_text: torch.Tensor,
        prompt_speech_token: torch.Tensor,
        embedding: torch.Tensor | None,
        continuation: torch.Tensor,
    ) -> torch.Tensor:
        """Log-probabilities with `continuation` [1, n] appended to the prompt speech tokens.

        Returns [n + 1, V] float32: row j predicts continuation[j], the last row the token after it.
        One full causal pass (no cache); the reference for the incremental decoder.
        """
        speech = torch.cat([self._ids(prompt_speech_token, "prompt_speech_token"),
                            self._ids(continuation, "continuation")], dim=1)
        x = self.build_input(text, prompt_text, speech)
        n = continuation.size(1)
        hidden = self.llm(x)[0, x.size(1) - n - 1 :]
        return self.llm_decoder(hidden).float().log_softmax(dim=-1)


class Qwen2LM(_QwenSpeechLM):
    """The speech LLM with SOS/TASK in a 2-row `llm_embedding` and 3 special ids (EOS, unused, FILL).

    Constructor: `Qwen2LM(cfg: QwenLMConfig)`.
    """

    N_SPECIAL = 3
    DECODER_BIAS = True
    SOS = 0  # rows of llm_embedding
    TASK_ID = 1

    def __init__(self, cfg: QwenLMConfig) -> None:
        super().__init__(cfg)
        self.llm_embedding = nn.Embedding(2, cfg.llm_input_size)

    @property
    def eos(self) -> int:
        return self.speech_token_size

    def _sos_task(self) -> tuple[torch.Tensor, torch.Tensor]:
        table = self.llm_embedding.weight
        return table[self.SOS], table[self.TASK_ID]


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

    def _sos_task(self) -> tuple[torch.Tensor, torch.Tensor]:
        table = self.speech_embedding.weight
        s = self.speech_token_size
        return table[s + self.SOS_OFFSET], table[s + self.TASK_OFFSET]

    def check_text(self, ids: torch.Tensor) -> None:
        if self.endofprompt_id is not None and not bool((ids == self.endofprompt_id).any()):
            raise ValueError(f"the text ids (prompt text + text) must contain <|endofprompt|> "
                             f"(id {self.endofprompt_id}); the recipe adds it")

    def tokens_for_flow(self, tokens: Iterable[int]) -> Iterator[int]:
        return drop_long_silences(tokens, self.silent_tokens, self.max_silent_run)
