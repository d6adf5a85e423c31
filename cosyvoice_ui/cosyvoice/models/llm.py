"""CosyVoice v1 `TransformerLM`: text token ids → discrete speech tokens (50 Hz, 4096 codes).

Legend: Tt text ids to speak, Tp prompt-text ids, Ts prompt speech tokens, L assembled sequence
length, D model width (`llm_input_size`), V = speech_token_size + 1 (the last id is EOS).

Sequence fed to the LLM (all [1, *, D]):
    [SOS] [speaker]? [text_encoder(prompt_text ⧺ text)] [TASK] [speech_embedding(prompt speech)]
SOS/TASK are rows 0/1 of `llm_embedding`; the speaker slot is absent (not zero) without an
embedding (v1 instruct). The text encoder and the LLM are both causal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..config import LLMConfig
from .decode_cache import DecodeCache
from .linears import column_major_linears, pack_linears, quantize_linears_int4, quantize_linears_int8
from .sampling import Sampler
from .transformer import Encoder

log = logging.getLogger(__name__)


class TransformerLM(nn.Module):
    """The v1 speech-token language model, with KV-cached autoregressive decoding.

    Does: assemble the input sequence, encode text, decode tokens one by one with a caller-supplied
    sampler and generator, teacher-forced log-probabilities for tests.
    Does not: tokenize text, extract prompt tokens/embeddings, batch requests, or decide sampling
    policy (the sampler is passed in). Attribute names follow upstream so `llm.pt` loads strictly.
    """

    SOS = 0  # rows of llm_embedding
    TASK_ID = 1
    # Read as a weight (its dtype and device pick the embedding's), so the fast layouts leave it an nn.Linear.
    FLOAT_LINEARS = ("spk_embed_affine_layer",)

    def __init__(self, cfg: LLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.speech_token_size = cfg.speech_token_size
        self.text_embedding = nn.Embedding(cfg.text_token_size, cfg.text_encoder_input_size)
        self.text_encoder = Encoder(cfg.text_encoder)
        self.text_encoder_affine_layer = nn.Linear(cfg.text_encoder.output_size, cfg.llm_input_size)
        self.llm_embedding = nn.Embedding(2, cfg.llm_input_size)
        self.llm = Encoder(cfg.llm)
        self.llm_decoder = nn.Linear(cfg.llm_output_size, cfg.speech_token_size + 1)
        self.speech_embedding = nn.Embedding(cfg.speech_token_size, cfg.llm_input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.llm_input_size)

    @property
    def eos(self) -> int:
        return self.speech_token_size

    def tokens_for_flow(self, tokens: Iterable[int]) -> Iterator[int]:
        """The decoded tokens as the flow should receive them (v1: unchanged)."""
        return iter(tokens)

    # --- inference layouts (after the strict load; the results no longer load `llm.pt`) ------------------

    def fuse_qkv(self) -> int:
        """Fuse the q/k/v projections of every attention layer (text encoder and LLM) into one linear
        each; returns how many layers were fused now. Same numbers up to summation order."""
        return self.text_encoder.fuse_qkv() + self.llm.fuse_qkv()

    def pack_linears(self) -> int:
        """Pre-pack the linears for oneDNN (`PackedLinear`, CPU only; check `onednn_linear_works()`);
        returns how many. Same numbers up to summation order."""
        return pack_linears(self, skip=self.FLOAT_LINEARS)

    def column_major_linears(self) -> int:
        """Store every linear weight column-major (same values, shapes and state-dict keys); returns how many."""
        return column_major_linears(self)

    def quantize_int8(self) -> int:
        """Int8 dynamic quantisation of the linears (CPU only; changes the numbers); returns how many."""
        return quantize_linears_int8(self, skip=self.FLOAT_LINEARS)

    def quantize_int4(self) -> tuple[int, int]:
        """4-bit grouped weights where the kernel takes the shape, int8 dynamic elsewhere (CPU only;
        changes the numbers more than int8); returns (int4, int8) counts."""
        return quantize_linears_int4(self, skip=self.FLOAT_LINEARS)

    def _ids(self, ids: torch.Tensor, name: str) -> torch.Tensor:
        assert ids.dim() == 2 and ids.size(0) == 1, f"{name} should be [1, T], got {tuple(ids.shape)}"
        return ids.to(device=self.llm_embedding.weight.device, dtype=torch.long)

    def encode_text(self, text_ids: torch.Tensor) -> torch.Tensor:
        """[1, T] ids (prompt text already prepended) → [1, T, D] through the causal text encoder."""
        emb = self.text_embedding(self._ids(text_ids, "text ids"))
        return self.text_encoder_affine_layer(self.text_encoder(emb))

    def speaker_slot(self, embedding: torch.Tensor) -> torch.Tensor:
        """x-vector [1, 192] → [1, 1, D]; an empty [0, 192] gives [1, 0, D] (no slot)."""
        weight = self.spk_embed_affine_layer.weight
        assert embedding.dim() == 2 and embedding.size(0) in (0, 1), (
            f"embedding should be [1, {self.cfg.spk_embed_dim}] or [0, {self.cfg.spk_embed_dim}], "
            f"got {tuple(embedding.shape)}"
        )
        if embedding.size(0) == 0:
            return weight.new_zeros(1, 0, self.cfg.llm_input_size)
        embedding = F.normalize(embedding.to(device=weight.device, dtype=weight.dtype), dim=1)
        return self.spk_embed_affine_layer(embedding).unsqueeze(1)

    def build_input(
        self,
        text: torch.Tensor,
        prompt_text: torch.Tensor,
        prompt_speech_token: torch.Tensor,
        embedding: torch.Tensor,
    ) -> torch.Tensor:
        """Assemble the LLM input.

        Args: text [1, Tt], prompt_text [1, Tp] (Tp may be 0), prompt_speech_token [1, Ts]
        (Ts may be 0), embedding [1, 192] or [0, 192].
        Returns: [1, L, D] with L = 1 + (1 if embedding) + Tp + Tt + 1 + Ts.
        """
        ids = torch.cat([self._ids(prompt_text, "prompt_text"), self._ids(text, "text")], dim=1)
        encoded = self.encode_text(ids)
        table = self.llm_embedding.weight
        sos = table[self.SOS].reshape(1, 1, -1)
        task = table[self.TASK_ID].reshape(1, 1, -1)
        speech = self.speech_embedding(self._ids(prompt_speech_token, "prompt_speech_token"))
        return torch.cat([sos, self.speaker_slot(embedding), encoded, task, speech], dim=1)

    def length_limits(self, n_text: int) -> tuple[int, int]:
        """(min_len, max_len) in speech tokens for Tt text ids (prompt text not counted)."""
        return int(n_text * self.cfg.min_token_text_ratio), int(n_text * self.cfg.max_token_text_ratio)

    def _next_logp(self, hidden: torch.Tensor) -> torch.Tensor:
        """[1, T, D] → [V] float32 log-probabilities after the last position, on the CPU.

        Sampling runs on the CPU with a CPU generator, so a seed gives the same tokens on any
        device; the token must come back to the host each step anyway.
        """
        # [1, D] rather than [D]: int8 dynamic-quantised linears (fast precision) need a batch axis.
        return self.llm_decoder(hidden[:, -1])[0].float().log_softmax(dim=-1).cpu()

    def inference(
        self,
        text: torch.Tensor,
        prompt_text: torch.Tensor,
        prompt_speech_token: torch.Tensor,
        embedding: torch.Tensor,
        sampler: Sampler,
        generator: torch.Generator | None = None,
        max_len: int | None = None,
        min_len: int | None = None,
        ignore_eos: bool = False,
    ) -> Iterator[int]:
        """Decode speech tokens one at a time (ids 0..speech_token_size-1; EOS is never yielded).

        Args: as `build_input`, plus
            sampler: picks a token from [V] log-probs (e.g. `RasSampler`, `greedy`).
            generator: a CPU `torch.Generator` for the sampler; None makes a freshly seeded one.
            max_len / min_len: override the defaults of `length_limits(Tt)` (20x / 2x the text ids).
            ignore_eos: mask EOS at every step, so exactly max_len tokens come out (benchmarks).
        EOS is masked (-inf) while step < min_len; decoding stops when EOS is drawn or after max_len
        tokens. The iterator is lazy: stop iterating (or `close()` it) to stop decoding early.
        """
        # Checked here, eagerly; the decoding generator below only runs when iterated.
        if generator is None:
            generator = torch.Generator()
            generator.seed()  # non-deterministic, and leaves the global RNG alone
        if generator.device.type != "cpu":
            raise ValueError(f"the sampler runs on the CPU; pass a CPU torch.Generator, not {generator.device}")
        default_min, default_max = self.length_limits(text.size(1))
        min_len = default_min if min_len is None else min_len
        max_len = default_max if max_len is None else max_len
        return self._decode(text, prompt_text, prompt_speech_token, embedding, sampler, generator,
                            min_len, max_len, ignore_eos)

    @torch.inference_mode()
    def _decode(
        self,
        text: torch.Tensor,
        prompt_text: torch.Tensor,
        prompt_speech_token: torch.Tensor,
        embedding: torch.Tensor,
        sampler: Sampler,
        generator: torch.Generator,
        min_len: int,
        max_len: int,
        ignore_eos: bool,
    ) -> Iterator[int]:
        x = self.build_input(text, prompt_text, prompt_speech_token, embedding)
        log.debug("llm prefix %d positions, min_len %d, max_len %d", x.size(1), min_len, max_len)
        # KV buffers sized once for the whole decode; pages are touched only as they are used.
        cache = DecodeCache(self.llm, reserve=x.size(1) + max_len)
        decoded: list[int] = []
        for step in range(max_len):
            hidden = self.llm.forward_step(x, cache)
            logp = self._next_logp(hidden)
            if ignore_eos or step < min_len:
                logp[self.eos] = float("-inf")
            token = sampler(logp, decoded, generator)
            if token == self.eos:
                break
            assert 0 <= token < self.eos, f"sampler returned {token}, outside 0..{self.eos}"
            yield token
            decoded.append(token)
            x = self.speech_embedding.weight[token].reshape(1, 1, -1)

    @torch.inference_mode()
    def teacher_forced_logp(
        self,
        text: torch.Tensor,
        prompt_text: torch.Tensor,
        prompt_speech_token: torch.Tensor,
        embedding: torch.Tensor,
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
