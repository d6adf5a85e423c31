"""Voice styles (blends + offsets) and the on-disk voice-match cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui.offline.styles import MAX_OFFSET, StyleSpace, VoiceStyle, describe
from cosyvoice_ui.audio import audio_hash
from cosyvoice_ui.offline.store import MatchCache, MatchResult, read_match, write_match
from cosyvoice_ui.types import Audio

NAMES = ("v_a", "v_b", "v_c")


@pytest.fixture()
def space() -> StyleSpace:
    rng = np.random.default_rng(0)
    return StyleSpace({n: rng.standard_normal((510, 256)).astype(np.float32) for n in NAMES})


def test_stock_pack_is_the_voice(space: StyleSpace) -> None:
    pack = space.pack(space.stock("v_b"))
    assert pack.shape == (510, 256)
    np.testing.assert_array_equal(pack, space.packs[1])


def test_blend_and_offset(space: StyleSpace) -> None:
    offset = np.full(256, 0.5, np.float32)
    style = VoiceStyle(weights={"v_a": 3.0, "v_c": 1.0}, offset=offset)  # weights are renormalised
    expected = 0.75 * space.packs[0] + 0.25 * space.packs[2] + 0.5 * space.sigma[None, :]
    np.testing.assert_allclose(space.pack(style), expected, atol=1e-5)


def test_unknown_voice_is_refused(space: StyleSpace) -> None:
    with pytest.raises(KeyError, match="known: v_a, v_b, v_c"):
        space.pack(VoiceStyle(weights={"nope": 1.0}))
    with pytest.raises(KeyError):
        space.stock("nope")


def test_encode_decode_round_trip(space: StyleSpace) -> None:
    style = space.sample(np.random.default_rng(3))
    again = space.decode(space.encode(style))
    np.testing.assert_allclose(space.pack(again), space.pack(style), atol=1e-3)


def test_decode_clips_the_offset(space: StyleSpace) -> None:
    theta = np.concatenate([np.zeros(3), np.full(256, 10.0)])
    assert np.all(space.decode(theta).offset <= MAX_OFFSET)


def test_sample_is_seeded(space: StyleSpace) -> None:
    a = space.sample(np.random.default_rng(7))
    b = space.sample(np.random.default_rng(7))
    c = space.sample(np.random.default_rng(8))
    np.testing.assert_array_equal(space.pack(a), space.pack(b))
    assert not np.allclose(space.pack(a), space.pack(c))


def test_mix_is_linear(space: StyleSpace) -> None:
    a, b = space.stock("v_a"), space.stock("v_b")
    mixed = space.mix([a, b], np.array([1.0, 1.0]))
    np.testing.assert_allclose(space.pack(mixed), 0.5 * (space.packs[0] + space.packs[1]), atol=1e-5)


def test_style_json_round_trip(space: StyleSpace) -> None:
    style = space.sample(np.random.default_rng(1))
    data = json.loads(json.dumps(style.to_json()))
    again = VoiceStyle.from_json(data)
    np.testing.assert_allclose(space.pack(again), space.pack(style), atol=1e-4)
    with pytest.raises(ValueError, match="256"):
        VoiceStyle.from_json({"weights": {"v_a": 1}, "offset": [0.0, 1.0]})


def test_describe() -> None:
    text = describe(VoiceStyle(weights={"v_a": 0.6, "v_b": 0.4}, offset=np.full(256, 1.0, np.float32)))
    assert text == "60% v_a + 40% v_b, offset 1.0σ"


def test_match_cache_skips_corrupt_files(tmp_path: Path) -> None:
    cache = MatchCache(tmp_path)
    cache.cache_dir.mkdir(parents=True)
    (cache.cache_dir / "broken.json").write_text("{not json", encoding="utf-8")
    assert cache.cached_match("broken") is None  # matched again rather than failing the request


def test_match_cache(tmp_path: Path) -> None:
    cache = MatchCache(tmp_path)
    samples = np.linspace(-1, 1, 100, dtype=np.float32)
    key = audio_hash(Audio(samples, 16000))
    assert key != audio_hash(Audio(samples, 24000))  # the rate is part of the key
    assert key != audio_hash(Audio(samples[::-1].copy(), 16000)) and audio_hash(None) == ""
    assert cache.cached_match(key) is None
    style = VoiceStyle(weights={"v_c": 1.0})
    cache.cache_match(key, MatchResult(style, 0.7, 0.5, "v_a", "refine", evaluations=9, seconds=3.0))
    hit = cache.cached_match(key)
    assert hit is not None and hit.cached and hit.level == "refine"
    assert (hit.similarity, hit.baseline, hit.baseline_voice) == (0.7, 0.5, "v_a")
    assert hit.style.weights == {"v_c": 1.0}
    assert (cache.cache_dir / f"{key}.json").is_file() and cache.cache_dir == tmp_path / "offline" / "match_cache"


def test_match_file_fingerprint(tmp_path: Path) -> None:
    path = tmp_path / "features-offline.json"
    result = MatchResult(VoiceStyle(weights={"v_a": 1.0}), 0.6, 0.5, "v_a", "quick")
    write_match(path, result, fingerprint="abc")
    assert read_match(path, "abc") is not None
    assert read_match(path, "other models") is None
    assert read_match(tmp_path / "missing.json") is None


def test_match_cache_keeps_only_the_most_recently_used(tmp_path: Path) -> None:
    """Every new prompt recording adds a match: the cache evicts the least recently used beyond its cap."""
    import os

    cache = MatchCache(tmp_path, max_entries=3)
    result = MatchResult(VoiceStyle(weights={"v_a": 1.0}), 0.6, 0.5, "v_a", "quick")
    for n, key in enumerate("abc"):
        cache.cache_match(key, result)
        os.utime(cache.cache_dir / f"{key}.json", (1000 + n, 1000 + n))  # a, b, c: oldest first
    assert cache.cached_match("a") is not None  # a hit makes "a" the most recent
    cache.cache_match("d", result)
    assert sorted(p.stem for p in cache.cache_dir.glob("*.json")) == ["a", "c", "d"]  # "b" was evicted
