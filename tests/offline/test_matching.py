"""Voice-match search logic on a synthetic "speaker space" (no rendering), plus the shipped anchor table.

`SyntheticMatcher` replaces render + d-vector by a fixed random projection of the style pack, so the
quick guess, the refine search, margins, progress, cancel and seeding run in milliseconds.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui.errors import Cancelled
from cosyvoice_ui.offline.anchors import AnchorTable, anchor_styles, build_anchor_table, calibration_key
from cosyvoice_ui.offline.engine import OfflineEngine
from cosyvoice_ui.offline.styles import StyleSpace, VoiceStyle
from cosyvoice_ui.types import ProgressEvent

NAMES = ("v_a", "v_b", "v_c", "v_d", "v_e")

matching = pytest.importorskip("cosyvoice_ui.offline.matching", reason="needs torch for the speaker encoder module")


class SyntheticMatcher(matching.VoiceMatcher):
    """A matcher whose 'd-vector' of a style is a fixed projection of its pack (and of a prompt, the prompt itself)."""

    def __init__(self, space: StyleSpace, anchors: AnchorTable | None) -> None:
        self.space = space
        self.anchors = anchors
        self._stock_dvecs = None
        self._lock = threading.Lock()
        self.projection = np.random.default_rng(42).standard_normal((256, 64)) / 16.0
        self.center = space.packs.mean(axis=(0, 1))
        self.measured = 0

    def measure(self, style: VoiceStyle) -> np.ndarray:
        self.measured += 1
        return self.embed(self.space.pack(style))

    def embed(self, pack: np.ndarray) -> np.ndarray:
        v = np.tanh((pack.mean(axis=0) - self.center) @ self.projection)
        return (v / np.linalg.norm(v)).astype(np.float32)

    def embed_prompt(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        return samples  # tests pass the target d-vector itself as the "recording"


@pytest.fixture(scope="module")
def space() -> StyleSpace:
    rng = np.random.default_rng(0)
    base = rng.standard_normal(256)
    # Each voice: a shared base, its own direction, and a little variation across input lengths.
    return StyleSpace(
        {n: (base + rng.standard_normal(256) + 0.1 * rng.standard_normal((510, 256))).astype(np.float32) for n in NAMES}
    )


@pytest.fixture(scope="module")
def anchors(space: StyleSpace) -> AnchorTable:
    probe = SyntheticMatcher(space, None)
    return build_anchor_table(space, probe.measure, n_random=24)


HIDDEN = VoiceStyle(weights={"v_a": 0.5, "v_d": 0.5}, offset=np.full(256, 0.8, np.float32))


def test_quick_beats_the_nearest_stock_voice(space: StyleSpace, anchors: AnchorTable) -> None:
    matcher = SyntheticMatcher(space, anchors)
    target = matcher.measure(HIDDEN)
    result = matcher.match(target, 16000, level="quick")
    assert result.level == "quick" and result.evaluations == 2
    assert result.similarity >= result.baseline + matching.QUICK_MARGIN
    assert float(matcher.measure(result.style) @ target) == pytest.approx(result.similarity, abs=1e-5)


def test_quick_keeps_the_stock_voice_for_a_stock_prompt(space: StyleSpace, anchors: AnchorTable) -> None:
    matcher = SyntheticMatcher(space, anchors)
    target = matcher.measure(space.stock("v_c"))
    result = matcher.match(target, 16000, level="quick")
    assert result.baseline_voice == "v_c"
    assert result.style.weights == {"v_c": 1.0}


def test_refine_improves_and_is_seeded(space: StyleSpace, anchors: AnchorTable) -> None:
    matcher = SyntheticMatcher(space, anchors)
    target = matcher.measure(HIDDEN)
    quick = matcher.match(target, 16000, level="quick")
    events: list[ProgressEvent] = []
    refined = matcher.match(target, 16000, level="refine", seed=1, evaluations=60, progress=events.append)
    assert refined.similarity >= quick.similarity + matching.REFINE_MARGIN
    assert refined.evaluations == quick.evaluations + 60
    fractions = [e.fraction for e in events]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0
    again = matcher.match(target, 16000, level="refine", seed=1, evaluations=60)
    np.testing.assert_array_equal(space.pack(again.style), space.pack(refined.style))


def test_without_anchor_table_the_stock_voices_are_measured(space: StyleSpace) -> None:
    matcher = SyntheticMatcher(space, None)
    target = matcher.measure(HIDDEN)
    matcher.measured = 0
    result = matcher.match(target, 16000, level="quick")
    assert matcher.measured == len(NAMES) + 2  # the stock voices once, then two mixes
    assert result.similarity >= result.baseline


def test_cancel(space: StyleSpace, anchors: AnchorTable) -> None:
    matcher = SyntheticMatcher(space, anchors)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        matcher.match(matcher.measure(HIDDEN), 16000, level="refine", cancel=cancel)


def test_unknown_level(space: StyleSpace, anchors: AnchorTable) -> None:
    with pytest.raises(ValueError, match="quick, refine"):
        SyntheticMatcher(space, anchors).match(np.ones(64, np.float32), 16000, level="slow")  # type: ignore[arg-type]


def test_anchor_table_round_trip(space: StyleSpace, anchors: AnchorTable, tmp_path: Path) -> None:
    path = tmp_path / "anchors.npz"
    anchors.save(path)
    loaded = AnchorTable.load(path)
    assert loaded is not None and loaded.labels == anchors.labels
    np.testing.assert_allclose(loaded.dvecs, anchors.dvecs, atol=2e-3)  # stored as float16
    assert [label for label, _ in anchor_styles(space, 24)] == list(anchors.labels)


def test_shipped_anchor_table() -> None:
    table = AnchorTable.load()
    assert table is not None, "cosyvoice_ui/offline/data/anchors.npz is missing or stale"
    assert table.labels[:5] == ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
    assert table.thetas.shape == (len(table.labels), 5 + 256)
    assert table.dvecs.shape == (len(table.labels), 256)
    np.testing.assert_allclose(np.linalg.norm(table.dvecs, axis=1), 1.0, atol=1e-3)
    assert len(calibration_key()) == 16


@pytest.mark.slow
def test_shipped_anchor_table_matches_a_fresh_render(real_engine: OfflineEngine) -> None:
    table = AnchorTable.load()
    assert table is not None
    matcher = real_engine.matcher()
    for label in ("jm_kumo", "blend_kumo_alpha"):
        theta = table.thetas[table.row(label)]
        fresh = matcher.measure(real_engine.space.decode(theta))
        assert float(fresh @ table.dvecs[table.row(label)]) > 0.98, label
