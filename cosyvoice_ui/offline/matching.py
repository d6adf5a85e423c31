"""Approximate voice matching: find the blended Kokoro style whose output sounds most like a prompt.

"Sounds like" is the cosine between GE2E speaker d-vectors (`dvector`) of the prompt and of the
style reading two short calibration sentences (`anchors.CALIBRATION_TEXTS`). Two levels:

quick (a few seconds): embed the prompt, rank the shipped anchor table (stock voices, named blends,
    random blends, all pre-rendered), then render one or two mixes of the nearest anchors and keep
    the best. The nearest anchors play the part of a regressor from d-vector to style.
refine (a minute or two): an evolution strategy around the quick result over the blend logits and the
    256-d offset, with a success-based step size and a budget of renders; every render is one
    measured candidate, so the result can only improve on the quick one.

Each measurement is noisy (two short sentences), so a result replaces the nearest stock voice (quick)
or its starting point (refine) only when it beats it by a margin.

This matches gender, pitch range and rough timbre. It does not clone a voice.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from ..engine import raise_if_cancelled, report
from ..types import ProgressCallback
from .anchors import CALIBRATION_TEXTS, AnchorTable
from .dvector import SpeakerEncoder
from .frontend import OfflineFrontend
from .kokoro import SAMPLE_RATE, KokoroModel
from .store import MATCH_LEVELS, MatchLevel, MatchResult
from .styles import StyleSpace, VoiceStyle

log = logging.getLogger(__name__)

QUICK_TOP_K = 6  # anchors mixed into the quick candidates
QUICK_TEMPERATURE = 0.02  # softmax temperature over anchor cosines (cosines differ by ~0.01-0.1)
QUICK_MARGIN = 0.03  # how much a blend must beat the nearest stock voice by (cosine)
REFINE_MARGIN = 0.02  # how much a refined style must beat its starting point by
REFINE_EVALUATIONS = 36  # renders in a refine search (~2-4 s each on 2 cores)
REFINE_POPULATION = 4  # candidates per generation
REFINE_STEP = 0.5  # initial step of the offset (sigma units) and of the blend logits
REFINE_MAX_SECONDS = 240.0  # hard stop whatever the budget says
_GAP_S = 0.15  # silence between the calibration sentences


class VoiceMatcher:
    """Measures styles (render calibration sentences -> d-vector) and searches for a prompt's voice.

    Does: prompt embedding, quick anchor-based guess, refine search, progress and cancel.
    Does not: cache results or save voices (the engine does), or decide when to refine.
    Randomness comes only from the `seed` of `match` (a local numpy Generator).
    """

    def __init__(
        self,
        space: StyleSpace,
        model: KokoroModel,
        frontend: OfflineFrontend,
        encoder: SpeakerEncoder,
        anchors: AnchorTable | None,
    ) -> None:
        self.space = space
        self.model = model
        self.encoder = encoder
        self.anchors = anchors
        self.calibration_ids = [frontend.prepare(t)[0].ids[0] for t in CALIBRATION_TEXTS]
        self._stock_dvecs: np.ndarray | None = None
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls, space: StyleSpace, model: KokoroModel, frontend: OfflineFrontend, anchors: AnchorTable | None | str = "shipped"
    ) -> VoiceMatcher:
        """Load the speaker encoder and (by default) the shipped anchor table."""
        table = AnchorTable.load() if isinstance(anchors, str) else anchors
        return cls(space, model, frontend, SpeakerEncoder.from_resemblyzer(), table)

    # -- measuring -----------------------------------------------------------------------------

    def render_calibration(self, style: VoiceStyle) -> np.ndarray:
        """`style` reading the calibration sentences: [N] float32 at 24 kHz."""
        pack = self.space.pack(style)
        gap = np.zeros(int(_GAP_S * SAMPLE_RATE), dtype=np.float32)
        parts = []
        for ids in self.calibration_ids:
            parts += [self.model.render(ids, pack), gap]
        return np.concatenate(parts[:-1])

    def measure(self, style: VoiceStyle) -> np.ndarray:
        """[256] unit d-vector of `style` reading the calibration sentences."""
        return self.encoder.embed(self.render_calibration(style), SAMPLE_RATE)

    def embed_prompt(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """[256] unit d-vector of a prompt recording."""
        return self.encoder.embed(samples, sample_rate)

    def stock_dvecs(self) -> np.ndarray:
        """[V, 256] d-vectors of the stock voices (from the anchor table, else rendered once)."""
        with self._lock:
            if self._stock_dvecs is None:
                if self.anchors is not None and all(n in self.anchors.labels for n in self.space.names):
                    self._stock_dvecs = np.stack([self.anchors.dvecs[self.anchors.row(n)] for n in self.space.names])
                else:
                    self._stock_dvecs = np.stack([self.measure(self.space.stock(n)) for n in self.space.names])
            return self._stock_dvecs

    # -- searching -----------------------------------------------------------------------------

    def match(
        self,
        samples: np.ndarray,
        sample_rate: int,
        level: MatchLevel = "quick",
        seed: int | None = None,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        evaluations: int = REFINE_EVALUATIONS,
    ) -> MatchResult:
        """Find the style closest to the prompt `samples` ([N] float32 at `sample_rate`)."""
        if level not in MATCH_LEVELS:
            raise ValueError(f"unknown match level {level!r}; choose one of: {', '.join(MATCH_LEVELS)}")
        started = time.perf_counter()
        report(progress, "voice_match", 0.0, "listening to the prompt")
        target = self.embed_prompt(samples, sample_rate)
        stock = self.stock_dvecs() @ target
        baseline_voice = self.space.names[int(np.argmax(stock))]
        baseline = float(stock.max())
        raise_if_cancelled(cancel)

        # Quick share of the progress bar: all of it for "quick", the first 10% for "refine".
        quick_share = 1.0 if level == "quick" else 0.1
        best_theta, best_sim, evals = self._quick(target, progress, cancel, quick_share)
        # A measured cosine is noisy (two short sentences; about ±0.03): a blend must beat the nearest
        # stock voice clearly, else the intact stock voice is the safer answer.
        style = self.space.decode(best_theta)
        if best_sim < baseline + QUICK_MARGIN:
            best_theta, best_sim = self.space.encode(self.space.stock(baseline_voice)), baseline
            style = self.space.stock(baseline_voice)
        if level == "refine":
            rng = np.random.default_rng(seed)
            theta, sim, more = self._refine(target, best_theta, best_sim, rng, evaluations, progress, cancel, started)
            evals += more
            if sim >= best_sim + REFINE_MARGIN:  # the same guard against keeping a lucky measurement
                style, best_sim = self.space.decode(theta), sim
        report(progress, "voice_match", 1.0, f"voice match {best_sim:.2f} (nearest preset {baseline:.2f})")
        return MatchResult(
            style=style,
            similarity=best_sim,
            baseline=baseline,
            baseline_voice=baseline_voice,
            level=level,
            evaluations=evals,
            seconds=time.perf_counter() - started,
        )

    def _candidates_from_anchors(self, target: np.ndarray) -> tuple[list[np.ndarray], np.ndarray, float]:
        """The best measured anchor (free) and mixes of the nearest anchors to try.

        Returns (mixes to render, best anchor theta, its cosine).
        """
        if self.anchors is None:
            sims = self.stock_dvecs() @ target
            thetas = np.stack([self.space.encode(self.space.stock(n)) for n in self.space.names])
        else:
            sims = self.anchors.dvecs @ target
            thetas = self.anchors.thetas.astype(np.float64)
        order = np.argsort(-sims)
        best = int(order[0])
        top = order[: min(QUICK_TOP_K, len(order))]
        mixes = []
        for temperature in (QUICK_TEMPERATURE, 4 * QUICK_TEMPERATURE):
            weights = np.exp((sims[top] - sims[best]) / temperature)
            styles = [self.space.decode(thetas[i]) for i in top]
            mixes.append(self.space.encode(self.space.mix(styles, weights)))
        return mixes, thetas[best], float(sims[best])

    def _quick(
        self, target: np.ndarray, progress: ProgressCallback | None, cancel: threading.Event | None, share: float
    ) -> tuple[np.ndarray, float, int]:
        mixes, best_theta, best_sim = self._candidates_from_anchors(target)
        for i, theta in enumerate(mixes):
            raise_if_cancelled(cancel)
            report(progress, "voice_match", share * (i + 0.5) / len(mixes), "trying a blend of the nearest voices")
            sim = float(self.measure(self.space.decode(theta)) @ target)
            if sim > best_sim:
                best_theta, best_sim = theta, sim
        return np.asarray(best_theta, dtype=np.float64), best_sim, len(mixes)

    def _refine(
        self,
        target: np.ndarray,
        theta: np.ndarray,
        best: float,
        rng: np.random.Generator,
        budget: int,
        progress: ProgressCallback | None,
        cancel: threading.Event | None,
        started: float,
    ) -> tuple[np.ndarray, float, int]:
        """A greedy (1+lambda) evolution strategy with a success-based step size.

        Each candidate perturbs the current best; an improvement is kept at once. The step grows after a
        generation with an improvement and shrinks after one without. For a given seed the search is
        deterministic unless REFINE_MAX_SECONDS cuts it short on a very slow machine.
        """
        step = REFINE_STEP
        evals = 0
        n_logits = self.space.n_voices
        while evals < budget and time.perf_counter() - started < REFINE_MAX_SECONDS:
            improved = False
            for _ in range(min(REFINE_POPULATION, budget - evals)):
                raise_if_cancelled(cancel)
                noise = rng.standard_normal(theta.shape)
                noise[:n_logits] *= 1.5  # the blend logits need bigger moves than the offset
                candidate = theta + step * noise
                # Decode/encode clips the offset into the allowed box so the search cannot leave it.
                candidate = self.space.encode(self.space.decode(candidate))
                sim = float(self.measure(self.space.decode(candidate)) @ target)
                evals += 1
                report(progress, "voice_match", 0.1 + 0.9 * evals / budget, f"refining: best {max(best, sim):.2f}")
                if sim > best:
                    theta, best, improved = candidate, sim, True
            step = step * 1.25 if improved else step * 0.8
            log.debug("refine: %d renders, best %.3f, step %.2f", evals, best, step)
        return theta, best, evals
