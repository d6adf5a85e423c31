"""Token samplers for the speech-token LLMs: repetition-aware sampling (RAS) and greedy.

A sampler is a callable `(logp, decoded, generator) -> token id`:
    logp: [V] float log-probabilities of the next token (the caller has already applied any
          EOS mask); the sampler may not assume it can modify it in place.
    decoded: the tokens generated so far for this segment (prompt tokens excluded).
    generator: the request's `torch.Generator`, on the same device as `logp`.

Randomness comes only from the generator passed in, never from torch's global RNG. RAS consumes
it exactly like upstream (`ras_sampling` in CosyVoice's `cosyvoice/utils/common.py`): one
`multinomial(1, replacement=True)` over the kept nucleus per step, plus one over the full softmax
only when the repetition check fires. So a CPU generator seeded with s reproduces upstream's tokens
after `torch.manual_seed(s)` (given the same log-probabilities).

Not here: temperature, beam search, batching (CosyVoice uses none of them at inference).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from ..config import SamplingConfig

log = logging.getLogger(__name__)


class Sampler(Protocol):
    """Picks the next token id from log-probabilities [V]."""

    def __call__(self, logp: torch.Tensor, decoded: Sequence[int], generator: torch.Generator | None) -> int: ...


def greedy(logp: torch.Tensor, decoded: Sequence[int], generator: torch.Generator | None = None) -> int:
    """Argmax (the first index among exact ties). Deterministic; ignores `decoded` and `generator`."""
    return int(torch.argmax(logp).item())


def _float32(x: float) -> float:
    """Round a Python float to the nearest float32 (returned as a Python float)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def top_stable(probs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest of probs [V] and their ids, in stable descending order (equal values: the lower id first):
    exactly `probs.sort(descending=True, stable=True)` cut to k. `topk` finds them ~30x faster than sorting all
    6,761 speech tokens (~0.7 ms a decoded token); where the k-th value ties with one left out, which of the equal
    ones are in depends on the whole order, so that case sorts everything."""
    if k + 1 >= probs.numel():
        values, ids = probs.sort(descending=True, stable=True)
        return values[:k], ids[:k]
    values, ids = probs.topk(k + 1)
    if not bool(values[k - 1] > values[k]):  # a tie across the cut (or a NaN): the full order decides
        values, ids = probs.sort(descending=True, stable=True)
        return values[:k], ids[:k]
    by_id = ids[:k].argsort()  # topk's order among equal values is unspecified: lower ids first, then stably by value
    values, ids = values[:k][by_id], ids[:k][by_id]
    order = values.sort(descending=True, stable=True).indices
    return values[order], ids[order]


def nucleus_candidates(probs: torch.Tensor, top_p: float, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept nucleus of a distribution, most probable first.

    probs [V] → (kept probabilities [n], their token ids [n]), 1 <= n <= top_k. Tokens are taken in
    stable descending order while the mass taken *before* each one is < top_p, so the token that
    crosses top_p is included. The running mass is accumulated in float32, one token at a time,
    because that is how upstream decides the cut (a float64 cumsum can differ at the boundary).
    """
    values, ids = top_stable(probs, top_k)
    threshold = _float32(top_p)  # upstream compares a float32 tensor with top_p
    mass = 0.0
    kept = 0
    for p in values.tolist():
        if kept > 0 and not mass < threshold:
            break
        mass = _float32(mass + p)  # float32 + float32, correctly rounded (exact in float64 first)
        kept += 1
    return values[:kept], ids[:kept]


def is_repetition(decoded: Sequence[int], token: int, win_size: int, tau_r: float) -> bool:
    """True when `token` occurs at least win_size * tau_r times in the last `win_size` tokens."""
    window = decoded[-win_size:] if win_size > 0 else []
    return sum(1 for t in window if t == token) >= win_size * tau_r


@dataclass(frozen=True)
class RasSampler:
    """Repetition-aware sampling (VALL-E 2) as configured in the CosyVoice yaml.

    1. Nucleus: sample from the top-p/top-k set (see `nucleus_candidates`), proportionally to p.
    2. If that token occurs >= win_size * tau_r times in the last win_size decoded tokens, draw again
       from the full softmax, with the repeated token banned when `ban_repeated` (upstream since
       Feb 2026; earlier releases re-drew without the ban).

    Requires a generator: the library never draws from the global RNG.
    """

    top_p: float = 0.8
    top_k: int = 25
    win_size: int = 10
    tau_r: float = 0.1
    ban_repeated: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")

    @classmethod
    def from_config(cls, cfg: SamplingConfig, ban_repeated: bool = True) -> RasSampler:
        return cls(cfg.top_p, cfg.top_k, cfg.win_size, cfg.tau_r, ban_repeated)

    def __call__(self, logp: torch.Tensor, decoded: Sequence[int], generator: torch.Generator | None) -> int:
        """logp [V] → token id."""
        if generator is None:
            raise ValueError("RasSampler needs a torch.Generator (per request); it never uses the global RNG")
        probs, ids = nucleus_candidates(logp.softmax(dim=0), self.top_p, self.top_k)
        token = int(ids[probs.multinomial(1, replacement=True, generator=generator)].item())
        if not is_repetition(decoded, token, self.win_size, self.tau_r):
            return token
        if self.ban_repeated:
            logp = logp.clone()
            logp[token] = float("-inf")
        return int(logp.softmax(dim=0).multinomial(1, replacement=True, generator=generator).item())
