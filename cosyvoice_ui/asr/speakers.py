"""Who speaks when: recordings told apart by voice, for a dub whose cues come from transcription.

Each recording (one transcribed stretch) becomes a vector, and the vectors are clustered bottom-up
(`cluster_speakers`): cosine distance, average linkage (two groups are as far apart as their members are on
average), merging until the closest two groups are further apart than the embedder's threshold, or into the
number of speakers the user gave. Recordings shorter than `MIN_JUDGE_S` carry too little voice to judge (a
half-second clip lay up to 0.26 from its own voice's other clips, past the threshold below), so they are left
out of the clustering and join the group nearest to them afterwards.

The vector comes from the loaded model's speaker network when it lends one (`Engine.speaker_embedder`: CAM++
in a CosyVoice folder), else from `voice_statistics`, which needs no weights: the mean and spread of each
cepstral coefficient over the loud frames. That describes the shape of a voice's spectrum (vocal tract,
pitch region, brightness) and separates clearly different voices, such as a man's and a woman's; two similar
voices stay together.

Measured (`VOICE_STATISTICS_THRESHOLD`) on the offline voice's five stock speakers, seven English sentences
each (1.7-3.2 s), 16 kHz: the cosine distance between two sentences of one speaker was at most 0.036 (0.11 on
their first second alone, 0.26 on their first half second); between the man (jm_kumo) and the women it was at
least 0.21, and between jm_kumo and jf_alpha (the test kit's two voices) at least 0.39 (0.40 on first seconds);
two of the women are 0.03 apart and are one voice to these statistics. The threshold 0.25 sits between.

Nothing here imports torch: numpy, and scipy's hierarchical clustering.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ..types import Audio
from .signal import ASR_RATE, to_asr_rate

log = logging.getLogger(__name__)

MAX_SPEAKERS = 8  # more groups than this in one video is the clustering splitting a voice, not a cast
MIN_JUDGE_S = 1.0  # shorter recordings join the nearest group (see the module)
MAX_CLUSTERED = 1000  # the longest judged recordings clustered (a 4 MB distance table); the rest join after
VOICE_STATISTICS_THRESHOLD = 0.25  # cosine distance; measured (see the module)

_WINDOW = 400  # 25 ms at 16 kHz
_HOP = 160  # 10 ms
_FFT = 512
_BANDS = 40
_COEFFICIENTS = 20  # c0 (loudness) is dropped: the level of a recording says nothing of the voice
_LOUD_DB = 30.0  # frames this far under the recording's loudest are pauses, not voice


def _mel_bands(rate: int = ASR_RATE, low: float = 60.0, high: float = 7600.0) -> np.ndarray:
    """[bands, FFT bins] triangular filters evenly spaced on the mel scale."""
    def to_mel(hz):
        return 2595.0 * np.log10(1.0 + np.asarray(hz) / 700.0)

    def to_hz(mel):
        return 700.0 * (10.0 ** (np.asarray(mel) / 2595.0) - 1.0)

    edges = to_hz(np.linspace(to_mel(low), to_mel(high), _BANDS + 2))
    bins = np.arange(_FFT // 2 + 1) * rate / _FFT
    filters = np.zeros((_BANDS, bins.size))
    for band in range(_BANDS):
        left, centre, right = edges[band:band + 3]
        rising = (bins - left) / (centre - left)
        falling = (right - bins) / (right - centre)
        filters[band] = np.clip(np.minimum(rising, falling), 0.0, None)
    return filters


_FILTERS = _mel_bands()
_DCT = np.cos(np.pi * np.arange(_COEFFICIENTS)[:, None] * (2 * np.arange(_BANDS)[None, :] + 1) / (2 * _BANDS))
# Higher coefficients are smaller but carry the finer detail of a voice's spectrum: weighted up (measured: the
# man and the women were 0.21 apart unweighted, 0.39 weighted, with one speaker's sentences as close as before).
_LIFTER = np.sqrt(np.arange(1, _COEFFICIENTS))


def voice_statistics(audio: Audio) -> np.ndarray:
    """A voice vector that needs no weights (see the module): [38] float32, the lifted cepstral coefficients
    c1-c19's mean and standard deviation over the frames within `_LOUD_DB` of the loudest."""
    samples = to_asr_rate(np.asarray(audio.samples, np.float32), audio.sample_rate).astype(np.float64)
    if samples.size < _WINDOW:
        samples = np.pad(samples, (0, _WINDOW - samples.size))
    count = 1 + (samples.size - _WINDOW) // _HOP
    index = np.arange(_WINDOW)[None, :] + _HOP * np.arange(count)[:, None]
    power = np.abs(np.fft.rfft(samples[index] * np.hanning(_WINDOW), _FFT)) ** 2
    level = 10.0 * np.log10(power.sum(axis=1) + 1e-12)
    loud = level > level.max() - _LOUD_DB
    cepstra = np.log(power[loud] @ _FILTERS.T + 1e-10) @ _DCT.T
    cepstra = cepstra[:, 1:] * _LIFTER
    return np.concatenate([cepstra.mean(axis=0), cepstra.std(axis=0)]).astype(np.float32)


def cosine_distances(vectors: np.ndarray, others: np.ndarray | None = None) -> np.ndarray:
    """[N, M] 1 - cosine similarity of each row of `vectors` with each row of `others` (default: `vectors`);
    a zero row is 1 from everything."""
    def unit(rows):
        rows = np.asarray(rows, np.float64)
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)

    return np.clip(1.0 - unit(vectors) @ unit(vectors if others is None else others).T, 0.0, 2.0)


def _after_merges(tree: np.ndarray, count: int, merges: int) -> np.ndarray:
    """The group of each of `count` items after the first `merges` rows of a scipy linkage `tree` (exactly
    `count - merges` groups, ties or not: cutting at a distance could not split equally distant groups)."""
    owner = np.arange(2 * count - 1)
    for row, (first, second, _, _) in enumerate(tree[:merges]):
        owner[int(first)] = owner[int(second)] = count + row

    def root(node: int) -> int:
        while owner[node] != node:
            node = owner[node]
        return node

    return np.array([root(item) for item in range(count)])


def cluster_speakers(vectors: np.ndarray, seconds: Sequence[float], threshold: float, count: int | None = None,
                     max_speakers: int = MAX_SPEAKERS) -> list[int]:
    """A speaker number (0, 1, ...: in the order each first speaks) for each row of `vectors` ([N, D], one per
    recording of `seconds` length), by agglomerative clustering (see the module): groups closer than
    `threshold` (cosine distance) merge; at most `max_speakers` groups, or exactly `count` when given (fewer
    only when there are fewer judged recordings)."""
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    vectors = np.asarray(vectors, np.float64)
    total = len(vectors)
    if total == 0:
        return []
    lengths = np.asarray(seconds, np.float64)
    judged = np.flatnonzero(lengths >= MIN_JUDGE_S)
    if judged.size == 0:
        judged = np.arange(total)  # nothing is long enough: judge what there is
    if judged.size > MAX_CLUSTERED:
        judged = np.sort(judged[np.argsort(-lengths[judged], kind="stable")[:MAX_CLUSTERED]])
    if judged.size == 1:
        groups = np.zeros(1, dtype=int)
    else:
        # The merges, closest first (average linkage only ever merges further apart than before).
        tree = linkage(squareform(cosine_distances(vectors[judged]), checks=False), method="average")
        if count is not None:
            left = min(count, judged.size)
        else:
            left = min(judged.size - int(np.sum(tree[:, 2] <= threshold)), max_speakers)
        groups = _after_merges(tree, judged.size, judged.size - left)
    found = np.zeros(total, dtype=int)
    found[judged] = groups
    names = np.unique(groups)
    rest = np.setdiff1d(np.arange(total), judged)  # too short to judge, or past the cap: the nearest group
    for row, distances in zip(rest, cosine_distances(vectors[rest], vectors[judged]) if rest.size else []):
        found[row] = names[int(np.argmin([distances[groups == name].mean() for name in names]))]
    order: dict[int, int] = {}
    for group in found:
        order.setdefault(int(group), len(order))
    log.info("told %d speaker(s) apart in %d recordings (%d judged)", len(order), total, judged.size)
    return [order[int(group)] for group in found]
