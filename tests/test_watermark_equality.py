"""Our PerTh (cosyvoice_ui/watermark) against the package's own model code (tests/watermark_reference.py): the
same networks from the same weights give the same marked signal and the same detector scores.

Tolerances, measured: the marked signal at 32 kHz differs by at most about 5e-7 (float32 rounding: ours adds the
spectrum's change to the signal, the package resynthesises the whole spectrum; the limit here is 2e-5), scores by
at most about 1e-6 (limit 1e-4). The package's inverse STFT drops the last (length mod 320) samples; the
comparison is over the samples it returns. Embedding at other rates is not compared sample for sample (the package
resamples with soxr, ours by polyphase and only the mark's change); the detector scores of ours at 16 and 24 kHz
are compared with the package's detector, which resamples by polyphase as ours does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cosyvoice_ui.serving.default_voice import builtin_audio
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.watermark import perth, spectral
from cosyvoice_ui.watermark.perth import PerthMark, to_rate
from tests.watermark_reference import package_watermarker, site_folder

pytestmark = pytest.mark.skipif(site_folder() is None, reason="resemble-perth==1.0.1 is not installed "
                                "(requirements-offline.txt)")

RATE = spectral.RATE
SIGNAL_TOLERANCE = 2e-5
SCORE_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def pair():
    ours = PerthMark.load()
    with package_watermarker() as theirs:
        yield ours, theirs


def signals() -> dict[str, np.ndarray]:
    """Real speech (the built-in voice, 5.4 s), a synthetic voice, and a chord with noise bursts (3.3 s)."""
    speech = builtin_audio()
    rng = np.random.default_rng(7)
    t = np.arange(int(3.3 * RATE)) / RATE
    chord = sum(np.sin(2 * np.pi * f * t) for f in (196.0, 247.0, 294.0)) * 0.1
    bursts = (rng.standard_normal(t.size) * (np.sin(2 * np.pi * 1.5 * t) > 0.6) * 0.05)
    return {"speech": to_rate(speech.samples, speech.sample_rate, RATE),
            "voice": to_rate(voice_clip(4.0, 16000, seed=3).samples, 16000, RATE),
            "chord": (chord + bursts).astype(np.float32)}


def test_the_networks_match_on_the_same_levels(pair) -> None:
    ours, theirs = pair
    levels = torch.rand(1, spectral.SUBBAND, 257) * 0.6
    mask = torch.ones(1, 1, 257)
    mask[..., :20] = 0
    with torch.no_grad():
        marked, their_mask = theirs.perth_net.encoder(torch.cat([levels, torch.rand(1, spectral.BINS
                                                                                    - spectral.SUBBAND, 257)], 1))
        residual = ours.network.encoder.residual(levels[0]) * their_mask[0]
        assert torch.allclose(marked[0, :spectral.SUBBAND], levels[0] + residual, atol=1e-6)
        their_score = theirs.perth_net.decoder(torch.cat([levels, torch.zeros(1, 897, 257)], 1))[0]
        our_score = ours.network.decoder.score(levels[0], spectral.voiced(torch.cat(
            [levels, torch.zeros(1, 897, 257)], 1)[0].sum(0)))
        assert abs(float(their_score) - float(our_score)) < SCORE_TOLERANCE


@pytest.mark.parametrize("name", ["speech", "voice", "chord"])
def test_the_marked_signal_and_the_scores_match_at_32k(pair, name: str) -> None:
    ours, theirs = pair
    signal = signals()[name]
    with torch.no_grad():
        expected = theirs.apply_watermark(signal, RATE)
    got = ours.embed(signal, RATE)
    assert got.shape == signal.shape and len(expected) == len(signal) - len(signal) % spectral.HOP
    assert np.abs(got[:len(expected)] - expected).max() < SIGNAL_TOLERANCE
    for tested in (signal, got):
        with torch.no_grad():
            their_score = float(theirs.get_watermark(tested, RATE, round=False))
        assert abs(ours.score(tested, RATE).value - their_score) < SCORE_TOLERANCE
    assert ours.score(got, RATE).marked
    if name != "chord":  # a held chord scores 0.75 unmarked in both: the network's own false alarm on music
        assert not ours.score(signal, RATE).marked


@pytest.mark.parametrize("rate", [16000, 24000, 22050])
def test_scores_at_other_rates_match_the_packages_detector(pair, rate: int) -> None:
    ours, theirs = pair
    speech = builtin_audio()
    signal = to_rate(speech.samples, speech.sample_rate, rate)
    marked = ours.embed(signal, rate)
    for tested in (signal, marked):
        with torch.no_grad():
            their_score = float(theirs.get_watermark(tested, rate, round=False))
        assert abs(ours.score(tested, rate).value - their_score) < SCORE_TOLERANCE
    assert ours.score(marked, rate).marked and not ours.score(signal, rate).marked


def test_a_long_signal_is_marked_and_scored_block_by_block_as_it_is_whole(pair, monkeypatch) -> None:
    """25 s: more frames than one analysis block (256) and one network block (1024): the blocks' seams leave no
    trace (each encoder block sees the 15 frames the network reaches on either side)."""
    ours, theirs = pair
    speech = to_rate(builtin_audio().samples, 24000, RATE)
    signal = np.tile(speech, 5)[:25 * RATE]
    with torch.no_grad():
        expected = theirs.apply_watermark(signal, RATE)
    got = ours.embed(signal, RATE)
    assert np.abs(got[:len(expected)] - expected).max() < SIGNAL_TOLERANCE
    monkeypatch.setattr(perth, "WINDOW_SECONDS", 30.0)  # one window: the decoder's stacks run in blocks
    for tested in (signal, got):
        with torch.no_grad():
            their_score = float(theirs.get_watermark(tested, RATE, round=False))
        assert abs(ours.score(tested, RATE).value - their_score) < SCORE_TOLERANCE
