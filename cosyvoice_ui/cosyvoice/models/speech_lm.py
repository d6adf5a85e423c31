"""What every speech-token LLM shares (v1 `TransformerLM`, v2/v3 `Qwen2LM` / `CosyVoice3LM`): the input
layout, the KV-cached sampling loop and teacher forcing.

Legend: Tt text ids to speak, Tp prompt-text ids, Ts prompt speech tokens, L assembled length, D model width,
S = speech_token_size (ordinary speech tokens are 0..S-1; every id from S up is special and stops a decode).

Sequence fed to the backbone (all [1, *, D]):
    [SOS] [speaker]? [encode_text(prompt_text ⧺ text)] [TASK] [speech_embedding(prompt speech)]
A subclass says where SOS/TASK live (`sos_task`), whether there is a speaker slot (`speaker_slot`), how text is
embedded (`encode_text`) and which cache its backbone decodes with (the backbone's `new_cache`).

The decoding rule is upstream's, shared: index S is masked (-inf) while step < min_len (EOS in v1 and v2, SOS in
v3, so v3's real EOS can end a decode early, as upstream's does); a pick ≥ S stops; `ignore_eos` masks every
special id so exactly max_len tokens come out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from .int8_kernel_linear import int8_linears_on_kernel
from .linears import (PackedLinear, column_major_linears, own_linear_weights, pack_linears, quantize_linears_int4,
                      quantize_linears_int8, row_blocks_linears)
from .sampling import Sampler
from .step_graph import record_rows, record_step

log = logging.getLogger(__name__)


class SpeechTokenLM(nn.Module):
    """Text ids → speech tokens, decoded one at a time with a caller-supplied sampler and CPU generator.

    Does not: tokenize text, extract prompt tokens or embeddings, batch requests, or choose the sampling policy.
    Subclasses build the modules (attribute names follow upstream so `llm.pt` loads strictly); this class needs
    `self.llm` (a backbone with `forward`, `forward_step(x, cache)` and `new_cache(reserve)`), `self.llm_decoder`
    and `self.speech_embedding`.
    """

    SOS = 0  # rows of `llm_embedding` (v1, v2); v3 keeps them in `speech_embedding` instead
    TASK_ID = 1
    # Linears the fast layouts leave alone: read as a weight, or never run at inference.
    KEEP_LINEARS: tuple[str, ...] = ()

    llm: Any
    llm_decoder: nn.Linear
    speech_embedding: nn.Embedding

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.cfg = cfg
        self.speech_token_size = cfg.speech_token_size

    # --- what a subclass says ----------------------------------------------------------------------------

    @property
    def eos(self) -> int:
        return self.speech_token_size

    @property
    def min_len_masked_id(self) -> int:
        """The index upstream masks while step < min_len (S in every generation; see the module docstring)."""
        return self.speech_token_size

    def sos_task(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The SOS and TASK rows [D] (default: rows 0 and 1 of `llm_embedding`)."""
        table = self.llm_embedding.weight
        return table[self.SOS], table[self.TASK_ID]

    def speaker_slot(self, embedding: torch.Tensor | None) -> torch.Tensor | None:
        """The speaker's [1, 1, D] slot after SOS, or None for none (default: the embedding is ignored)."""
        return None

    def encode_text(self, text_ids: torch.Tensor) -> torch.Tensor:
        """[1, T] ids (prompt text already prepended) → [1, T, D]."""
        raise NotImplementedError

    def check_text(self, ids: torch.Tensor) -> None:
        """Raise ValueError when prompt_text ⧺ text [1, Tp+Tt] cannot be decoded (nothing by default)."""

    def tokens_for_flow(self, tokens: Iterable[int]) -> Iterator[int]:
        """The decoded tokens as the flow should receive them (unchanged by default)."""
        return iter(tokens)

    # --- inference layouts (after the strict load; the results no longer load `llm.pt`) ------------------

    def pack_linears(self) -> int:
        """Pre-pack the linears for oneDNN (`PackedLinear`, CPU only; check `onednn_linear_works()`); returns
        how many. Same numbers up to summation order."""
        self.drop_decode_step()
        return pack_linears(self, skip=self.KEEP_LINEARS)

    def own_linear_weights(self) -> int:
        """Every linear weight as a private row-major copy (`own_linear_weights`); returns how many."""
        self.drop_decode_step()
        return own_linear_weights(self, skip=self.KEEP_LINEARS)

    def row_blocks_linears(self) -> int:
        """Every linear as a `RowBlocksLinear` (one-row steps on every thread); returns how many."""
        self.drop_decode_step()
        return row_blocks_linears(self, skip=self.KEEP_LINEARS)

    def has_packed_linears(self) -> bool:
        """True when `pack_linears` has run."""
        return any(isinstance(module, PackedLinear) for module in self.modules())

    def column_major_linears(self) -> int:
        """Store every linear weight column-major (same values, shapes and state-dict keys); returns how many."""
        self.drop_decode_step()
        return column_major_linears(self)

    def quantize_int8(self) -> int:
        """Int8 dynamic quantisation of the linears (CPU only; changes the numbers); returns how many."""
        self.drop_decode_step()
        return quantize_linears_int8(self, skip=self.KEEP_LINEARS)

    def int8_linears_on_kernel(self) -> int:
        """Move the int8 dynamic linears onto the project's own kernel (`int8_kernel_linear.py`; call only where
        `kernels.int8_linear_available()`); returns how many. Different numbers from fbgemm's (8-bit rows)."""
        self.drop_decode_step()
        return int8_linears_on_kernel(self)

    def attention_on_kernel(self, cache_dtype: torch.dtype | None = None) -> int:
        """Decoding steps' attention on the project's own kernel (`kernels/decode_attention.cpp`; call only where
        `kernels.decode_attention_available()`): every attention layer of the backbone. Returns how many. Float
        rounding away from torch's products and softmax. cache_dtype: what decodes keep their keys and values (and
        v1's projected positions) in from now on (torch.bfloat16: half the bytes a step reads; None: as computed)."""
        self.drop_decode_step()
        layers = [module for module in self.llm.modules() if hasattr(module, "kernel_attention")]
        for module in layers:
            module.kernel_attention = True
        self.llm.keep_cache_in(cache_dtype)
        return len(layers)

    def quantize_int4(self) -> tuple[int, int]:
        """4-bit grouped weights where the kernel takes the shape, int8 dynamic elsewhere (CPU only; changes the
        numbers more than int8); returns (int4, int8) counts."""
        self.drop_decode_step()
        return quantize_linears_int4(self, skip=self.KEEP_LINEARS)

    def record_decode_step(self) -> bool:
        """Record the backbone's one-row decoding step as a graph where it can (v2/v3's Qwen2 and v1's encoder on
        a CPU: `step_graph.py`; same numbers, less Python a step); True when decoding now takes it. Call it after
        the last re-layout of the weights (a layout method drops it)."""
        return record_step(self.llm)

    def record_decode_rows(self, width: int) -> int:
        """Record the backbone's steps of 2 .. `width` rows as well (continuous batching), where it can; returns
        how many row counts take a graph."""
        return record_rows(self.llm, width)

    def drop_decode_step(self) -> None:
        """Forget a recorded decoding step (see `record_decode_step`)."""
        drop = getattr(self.llm, "drop_step", None)
        if drop is not None:
            drop()

    def has_decode_step(self) -> bool:
        return getattr(self.llm, "step_graphs", {}).get(1) is not None

    # --- layout ------------------------------------------------------------------------------------------

    def _ids(self, ids: torch.Tensor, name: str) -> torch.Tensor:
        assert ids.dim() == 2 and ids.size(0) == 1, f"{name} should be [1, T], got {tuple(ids.shape)}"
        return ids.to(device=self.speech_embedding.weight.device, dtype=torch.long)

    def _text_ids(self, text: torch.Tensor, prompt_text: torch.Tensor) -> torch.Tensor:
        return torch.cat([self._ids(prompt_text, "prompt_text"), self._ids(text, "text")], dim=1)

    def build_input(self, text: torch.Tensor, prompt_text: torch.Tensor, prompt_speech_token: torch.Tensor,
                    embedding: torch.Tensor | None = None) -> torch.Tensor:
        """Assemble the LLM input.

        Args: text [1, Tt], prompt_text [1, Tp] (Tp may be 0), prompt_speech_token [1, Ts] (Ts may be 0),
        embedding: the speaker x-vector where the model has a speaker slot (v1: [1, 192] or [0, 192]).
        Returns: [1, L, D] with L = 1 + (speaker slot) + Tp + Tt + 1 + Ts.
        """
        ids = self._text_ids(text, prompt_text)
        self.check_text(ids)
        encoded = self.encode_text(ids)
        sos, task = self.sos_task()
        speech = self.speech_embedding(self._ids(prompt_speech_token, "prompt_speech_token"))
        slot = self.speaker_slot(embedding)
        parts = [sos.reshape(1, 1, -1), *([] if slot is None else [slot]), encoded, task.reshape(1, 1, -1), speech]
        return torch.cat(parts, dim=1)

    def length_limits(self, n_text: int) -> tuple[int, int]:
        """(min_len, max_len) in speech tokens for Tt text ids (prompt text not counted)."""
        return int(n_text * self.cfg.min_token_text_ratio), int(n_text * self.cfg.max_token_text_ratio)

    def step_input(self, token: int) -> torch.Tensor:
        """The next decoding step's input after `token`: its speech embedding, [1, 1, D]."""
        return self.speech_embedding.weight[token].reshape(1, 1, -1)

    def _next_logp(self, hidden: torch.Tensor) -> torch.Tensor:
        """[1, T, D] → [V] float32 log-probabilities after the last position, on the CPU.

        Sampling runs on the CPU with a CPU generator, so a seed gives the same tokens on any device; the token
        must come back to the host each step anyway.
        """
        # [1, D] rather than [D]: int8 dynamic-quantised linears (fast precision) need a batch axis.
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
        The iterator is lazy: stop iterating (or `close()` it) to stop decoding early.
        """
        # Checked here, eagerly; the decoding generator below only runs when iterated.
        generator, min_len, max_len = self.decode_setup(text, prompt_text, generator, min_len, max_len)
        return self._decode(text, prompt_text, prompt_speech_token, embedding, sampler, generator,
                            min_len, max_len, ignore_eos)

    def decode_setup(self, text: torch.Tensor, prompt_text: torch.Tensor, generator: torch.Generator | None,
                     min_len: int | None, max_len: int | None) -> tuple[torch.Generator, int, int]:
        """The checks and defaults of `inference` (shared with the batched decoder): (generator, min, max)."""
        if generator is None:
            generator = torch.Generator()
            generator.seed()  # non-deterministic, and leaves the global RNG alone
        if generator.device.type != "cpu":
            raise ValueError(f"the sampler runs on the CPU; pass a CPU torch.Generator, not {generator.device}")
        self.check_text(self._text_ids(text, prompt_text))
        default_min, default_max = self.length_limits(text.size(1))
        return (generator, default_min if min_len is None else min_len,
                default_max if max_len is None else max_len)

    def pick(self, logp: torch.Tensor, step: int, decoded: list[int], sampler: Sampler,
             generator: torch.Generator, min_len: int, ignore_eos: bool) -> int | None:
        """The decoding rule for one step: logp [V] (changed in place) → the next token, or None to stop."""
        stop = self.speech_token_size
        if ignore_eos:
            logp[stop:] = float("-inf")
        elif step < min_len:
            logp[self.min_len_masked_id] = float("-inf")
        token = sampler(logp, decoded, generator)
        if token >= stop:
            log.debug("llm stopped on %d after %d tokens", token, step)
            return None
        assert token >= 0, f"sampler returned {token}"
        return token

    @torch.inference_mode()
    def _decode(
        self,
        text: torch.Tensor,
        prompt_text: torch.Tensor,
        prompt_speech_token: torch.Tensor,
        embedding: torch.Tensor | None,
        sampler: Sampler,
        generator: torch.Generator,
        min_len: int,
        max_len: int,
        ignore_eos: bool,
    ) -> Iterator[int]:
        x = self.build_input(text, prompt_text, prompt_speech_token, embedding)
        log.debug("llm prefix %d positions, min_len %d, max_len %d", x.size(1), min_len, max_len)
        # KV buffers sized once for the whole decode; pages are touched only as they are used.
        cache = self.llm.new_cache(reserve=x.size(1) + max_len)
        decoded: list[int] = []
        for step in range(max_len):
            token = self.pick(self._next_logp(self.llm.forward_step(x, cache)), step, decoded, sampler, generator,
                              min_len, ignore_eos)
            if token is None:
                break
            yield token
            decoded.append(token)
            x = self.step_input(token)

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
        x = self.build_input(text, prompt_text, speech, embedding)
        n = continuation.size(1)
        hidden = self.llm(x)[0, x.size(1) - n - 1 :]
        return self.llm_decoder(hidden).float().log_softmax(dim=-1)

    @torch.inference_mode()
    def stepped_logp(self, text: torch.Tensor, prompt_text: torch.Tensor, prompt_speech_token: torch.Tensor,
                     embedding: torch.Tensor | None, continuation: torch.Tensor) -> torch.Tensor:
        """`teacher_forced_logp` the way decoding computes it: the prompt as one prefill into a cache, then one
        step per continuation token (`forward_step`: the recorded step, the cache's dtype, the attention kernel,
        where the model has them). Returns [n + 1, V] float32 as `teacher_forced_logp` does."""
        x = self.build_input(text, prompt_text, prompt_speech_token, embedding)
        tokens = self._ids(continuation, "continuation")[0].tolist()
        cache = self.llm.new_cache(reserve=x.size(1) + len(tokens) + 1)
        rows = [self._next_logp(self.llm.forward_step(x, cache))]
        for token in tokens:
            rows.append(self._next_logp(self.llm.forward_step(self.step_input(token), cache)))
        return torch.stack(rows)
