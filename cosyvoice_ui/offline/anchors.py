"""A table of voice styles with the speaker d-vectors of their output, shipped with the package.

Rendering one style and embedding it costs a few seconds of CPU, so measuring where the stock voices,
the named blends and some random blends land in d-vector space is done once, offline, and stored in
`data/anchors.npz` (float16, about 60 KB). Voice matching starts from this table: the nearest rows
to a prompt cost no rendering at all.

The table depends only on the fixed Kokoro weights, the calibration sentences and the speaker
encoder, all pinned; `build_anchor_table` regenerates it (`python scripts/build_offline_anchors.py`).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .styles import NAMED_BLENDS, StyleSpace, VoiceStyle

log = logging.getLogger(__name__)

# Two short sentences, one per language the backend speaks: every style is judged by how it
# sounds reading these (about 4 s of audio).
CALIBRATION_TEXTS = ("Bright red apples are sold here.", "我们下午见面吧。")
ANCHOR_FILE = "anchors.npz"
N_RANDOM = 60


def calibration_key() -> str:
    """Short hash of the calibration texts: a table built for other texts must not be used."""
    return hashlib.sha256("\n".join(CALIBRATION_TEXTS).encode()).hexdigest()[:16]


def anchor_styles(space: StyleSpace, n_random: int = N_RANDOM) -> list[tuple[str, VoiceStyle]]:
    """The styles of the table: the stock voices, the named blends, then `n_random` seeded random blends."""
    styles: list[tuple[str, VoiceStyle]] = [(n, space.stock(n)) for n in space.names]
    styles += [(name, VoiceStyle(weights=dict(w))) for name, w in NAMED_BLENDS if set(w) <= set(space.names)]
    styles += [(f"random_{k}", space.sample(np.random.default_rng(k))) for k in range(n_random)]
    return styles


@dataclass(frozen=True)
class AnchorTable:
    """Styles (as search parameters) and the d-vectors of their output.

    Attributes:
        labels: [K] row names ("jf_alpha", "blend_...", "random_7").
        thetas: [K, V + 256] float32 search parameters (see `StyleSpace.encode`).
        dvecs: [K, 256] float32 unit d-vectors of each style reading CALIBRATION_TEXTS.
    """

    labels: tuple[str, ...]
    thetas: np.ndarray
    dvecs: np.ndarray

    def save(self, path: Path) -> None:
        np.savez_compressed(
            path,
            labels=np.array(self.labels),
            thetas=self.thetas.astype(np.float16),
            dvecs=self.dvecs.astype(np.float16),
            calibration=np.array(calibration_key()),
        )

    @classmethod
    def load(cls, path: Path | None = None) -> AnchorTable | None:
        """The shipped table (or the one at `path`); None if absent or built for other calibration texts."""
        source = path if path is not None else importlib.resources.files(__package__) / "data" / ANCHOR_FILE
        try:
            with source.open("rb") as f, np.load(f) as npz:
                if str(npz["calibration"]) != calibration_key():
                    log.warning("anchor table was built for other calibration texts; ignoring it")
                    return None
                dvecs = npz["dvecs"].astype(np.float32)
                dvecs /= np.linalg.norm(dvecs, axis=1, keepdims=True)
                return cls(labels=tuple(str(x) for x in npz["labels"]), thetas=npz["thetas"].astype(np.float32), dvecs=dvecs)
        except FileNotFoundError:
            log.warning("anchor table %s not found; voice matching will start from the stock voices only", ANCHOR_FILE)
            return None

    def row(self, label: str) -> int:
        return self.labels.index(label)


def build_anchor_table(
    space: StyleSpace,
    measure: Callable[[VoiceStyle], np.ndarray],
    n_random: int = N_RANDOM,
    progress: Callable[[int, int], None] | None = None,
) -> AnchorTable:
    """Render every anchor style with `measure` (style -> unit d-vector) and collect the table."""
    styles = anchor_styles(space, n_random)
    dvecs = []
    for i, (_, style) in enumerate(styles):
        dvecs.append(measure(style))
        if progress is not None:
            progress(i + 1, len(styles))
    return AnchorTable(
        labels=tuple(label for label, _ in styles),
        thetas=np.stack([space.encode(s) for _, s in styles]).astype(np.float32),
        dvecs=np.stack(dvecs).astype(np.float32),
    )
