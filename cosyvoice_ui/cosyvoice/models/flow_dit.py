"""The DiT token-to-mel flow (`CausalMaskedDiffWithDiT`): speech tokens → 80-bin mel, causal.

Pipeline (B = 1): embed prompt + generated tokens (width = mel bins, no scaling, no encoder) →
`pre_lookahead_layer` (each token sees the next L; when the token list is not final its last L tokens are
look-ahead context only and produce no frames) → repeat every frame `token_mel_ratio` times = mu; speaker
x-vector → L2-normalise → `spk_embed_affine_layer` = spks; prompt mel in the first M1 frames = cond; then
`decoder` (`CausalConditionalCFM`, fixed noise) samples the mel over prompt + generated frames with the
DiT estimator (chunk attention when streaming) and the prompt frames are dropped.

Shapes and the call (`condition`, `inference`) are the causal flows' (`token_flow.CausalTokenFlow`); here is
only what this flow encodes with.

Streamed passes may keep what earlier passes computed (`inference_from` with a `DiTStreamState`,
`estimators/dit_stream.py`), so each computes only the frames it adds; the prompt's leading chunks are kept
per voice (`PromptPrefixes`), so a voice's first chunk computes only the chunk the new speech starts in.

Not here: streaming orchestration (which tokens go into which call, slicing the accumulated mel), the
vocoder.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn

from ..config import DiTConfig, DiTFlowConfig
from .cfm_causal import CausalConditionalCFM
from .estimators.dit_stream import DiTStreamState
from .lookahead import PreLookaheadLayer
from .token_flow import CausalTokenFlow

log = logging.getLogger(__name__)

CACHE_ENV = "COSYVOICE_FLOW_STREAM_CACHE_MB"  # what one stream may keep (0: streamed passes recompute all)
DEFAULT_STREAM_MB = 256
PREFIX_VOICES = 8  # voices whose prompt chunks are kept
PREFIX_MB = 256  # and the most they may take together


def stream_cache_bytes() -> int:
    """The bytes one stream's `DiTStreamState` may hold (`COSYVOICE_FLOW_STREAM_CACHE_MB`, default 256)."""
    try:
        megabytes = float(os.environ.get(CACHE_ENV, DEFAULT_STREAM_MB))
    except ValueError:
        megabytes = DEFAULT_STREAM_MB
    return max(0, int(megabytes * 2**20))


class PromptPrefixes:
    """The kept prompt chunks of recent voices (least recently used dropped first), so that every stream of
    a voice starts its first pass past them. Keyed by the prompt's tokens, mel and speaker embedding, the
    Euler steps, the guidance rows and the estimator object (a swapped estimator must not reuse them)."""

    def __init__(self, voices: int = PREFIX_VOICES, max_bytes: int = PREFIX_MB * 2**20) -> None:
        self.voices, self.max_bytes = voices, max_bytes
        self._states: OrderedDict[str, DiTStreamState] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def key(*parts: object) -> str:
        digest = hashlib.sha256()
        for part in parts:
            if isinstance(part, torch.Tensor):
                t = part.detach().to("cpu").contiguous()
                digest.update(str((tuple(t.shape), t.dtype)).encode())
                digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            else:
                digest.update(repr(part).encode())
            digest.update(b"|")
        return digest.hexdigest()

    def get(self, key: str) -> DiTStreamState | None:
        with self._lock:
            state = self._states.get(key)
            if state is None:
                self.misses += 1
                return None
            self._states.move_to_end(key)
            self.hits += 1
            return state.copy()

    def put(self, key: str, state: DiTStreamState) -> None:
        size = state.nbytes()
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._states.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes()
            self._states[key] = state.copy()
            self._bytes += size
            while len(self._states) > self.voices or self._bytes > self.max_bytes:
                _, dropped = self._states.popitem(last=False)
                self._bytes -= dropped.nbytes()

    def clear(self) -> None:
        with self._lock:
            self._states.clear()
            self._bytes = 0


class CausalMaskedDiffWithDiT(CausalTokenFlow):
    """DiT token-to-mel flow. Attribute names follow upstream so `flow.pt` loads strictly.

    Does not: batch several utterances (B = 1, so no padding masks are built), decide which tokens a
    streaming call gets, or choose its estimator (passed in: the registry picks it).
    """

    def __init__(self, cfg: DiTFlowConfig, estimator: Callable[[DiTConfig], nn.Module]) -> None:
        """estimator: the family's velocity-network class (`DiT`), built here from `cfg.cfm.estimator`."""
        if cfg.input_size != cfg.output_size:
            raise ValueError("the DiT flow uses the token embedding as mu directly, so input_size must equal "
                             f"output_size, got {cfg.input_size} and {cfg.output_size}")
        super().__init__(cfg)
        self.pre_lookahead_layer = PreLookaheadLayer(cfg.input_size, cfg.pre_lookahead_channels,
                                                     pre_lookahead_len=cfg.pre_lookahead_len)
        self.decoder = CausalConditionalCFM(cfg.cfm, estimator(cfg.cfm.estimator), mel_bins=cfg.output_size)
        self.prompt_prefixes = PromptPrefixes()  # not a module: nothing of it is in flow.pt

    def encode(self, x: torch.Tensor, context: torch.Tensor | None,
               streaming: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """No encoder: the pre-lookahead conv, each frame repeated r times = mu; the encoding returned is the
        conv's output [1, N, F]. `streaming` changes nothing here: no attention runs before the estimator."""
        # upstream's padding-mask multiply of the embedding is by ones at B = 1
        h = self.pre_lookahead_layer(x, context=context)
        return h, h.repeat_interleave(self.token_mel_ratio, dim=1).transpose(1, 2).contiguous()

    # --- streamed passes that keep what earlier passes computed ---------------------------------------------

    def new_stream_state(self, n_timesteps: int | None = None, max_bytes: int | None = None) -> DiTStreamState | None:
        """A state for one stream's chunk-causal passes, or None when no frame would fit in `max_bytes`
        (default `stream_cache_bytes()`). Keys/values are kept in the attention layers' `kept_dtype` (bf16 in
        fast mode where the CPU has native bf16: half the bytes of a kept frame)."""
        decoder = self.decoder
        estimator = decoder.estimator
        steps = decoder.n_timesteps if n_timesteps is None else n_timesteps
        rows = 1 if decoder.inference_cfg_rate == 0 else 2
        attention = estimator.transformer_blocks[0].attn
        kv_dtype = attention.kept_dtype
        cfg = estimator.cfg
        inner = cfg.heads * cfg.dim_head
        element = torch.empty(0, dtype=kv_dtype or torch.float32).element_size()
        per_frame = cfg.depth * rows * steps * 2 * inner * element
        budget = stream_cache_bytes() if max_bytes is None else max_bytes
        chunk = cfg.static_chunk_size
        frames = (budget // per_frame) // chunk * chunk
        if frames < chunk:
            return None
        return DiTStreamState(steps, rows, chunk, max_frames=frames, kv_dtype=kv_dtype)

    def prompt_prefix_frames(self, prompt_tokens: int, chunk: int) -> int:
        """Leading frames that depend on the prompt alone, in whole chunks: a frame of token i reads tokens up
        to i + L through the look-ahead convolution, so only frames of tokens before T1 − L qualify."""
        usable = self.token_mel_ratio * max(0, prompt_tokens - self.pre_lookahead_len)
        return usable // chunk * chunk

    @torch.inference_mode()
    def inference_from(self, token: torch.Tensor, prompt_token: torch.Tensor, prompt_feat: torch.Tensor,
                       embedding: torch.Tensor, state: DiTStreamState, n_timesteps: int | None = None,
                       finalize: bool = False) -> tuple[torch.Tensor, int]:
        """A chunk-causal streamed pass (`inference(..., streaming=True, finalize=finalize)`), computing only
        the frames past those `state` keeps. The first pass of a stream starts past the voice's kept prompt
        chunks (made by this pass when the voice is new). Arguments as for `inference`; `finalize=True` is a
        last pass in chunk attention, which upstream runs in full attention instead (a fast-mode choice:
        `FastSettings.chunked_last_pass`). Returns (mel [1, F, M1 + M2 − first] float32, first): `first` is
        the absolute frame (prompt frames counted) the mel starts at, at most the first frame this pass adds
        to what earlier passes emitted."""
        c = self.condition(token, prompt_token, prompt_feat, embedding, streaming=True, finalize=finalize)
        total = c.mu.size(2)
        if state.frames == 0:
            self._start_past_prompt(c, prompt_token, embedding, state, n_timesteps)
        first = state.frames
        try:
            mel = self.decoder.sample_from(c.mu, c.spks, c.cond, state, n_timesteps=n_timesteps)
        except BaseException:
            state.discard_pending()
            raise
        state.commit(total)
        return mel, first

    def _start_past_prompt(self, c, prompt_token: torch.Tensor, embedding: torch.Tensor, state: DiTStreamState,
                           n_timesteps: int | None) -> None:
        prefix = min(self.prompt_prefix_frames(prompt_token.size(1), state.chunk), state.max_frames or 0)
        if prefix == 0 or prefix >= c.mu.size(2):
            return
        store = self.prompt_prefixes
        key = store.key(prompt_token, c.cond[:, :, :prefix], embedding, state.steps, state.rows,
                        id(self.decoder.estimator), prefix)
        kept = store.get(key)
        if kept is not None:
            state.adopt(kept)
            return
        self.decoder.sample_from(c.mu[:, :, :prefix], c.spks, c.cond[:, :, :prefix], state, n_timesteps=n_timesteps)
        state.commit(prefix)
        store.put(key, state)
