"""Decoding helpers of models/transformer.py: the preallocated KV cache and the projected-position table."""

from __future__ import annotations

import torch

from cosyvoice_ui.cosyvoice.config import EncoderConfig
from cosyvoice_ui.cosyvoice.models.transformer import Encoder, KVCache, RelPositionProjections


def _encoder(seed: int = 0) -> Encoder:
    cfg = EncoderConfig(input_size=16, output_size=32, attention_heads=4, linear_units=64, num_blocks=2,
                        input_layer="linear_legacy", layer_type="transformer", activation="relu", static_chunk_size=1)
    torch.manual_seed(seed)
    return Encoder(cfg).eval()


def test_kv_cache_appends_in_place_and_grows_past_its_capacity() -> None:
    cache = KVCache(capacity=3)
    ka, va, kb, vb = (torch.randn(1, 2, n, 4) for n in (2, 2, 1, 1))
    k, v = cache.append(ka, va)
    assert k.shape == (1, 2, 2, 4) and torch.equal(k, ka) and torch.equal(v, va)
    cache.append(kb, vb)
    assert cache.capacity == 3
    assert torch.equal(cache.view(), torch.cat([torch.cat([ka, kb], 2), torch.cat([va, vb], 2)], dim=-1))
    kc, vc = torch.randn(1, 2, 4, 4), torch.randn(1, 2, 4, 4)
    k, v = cache.append(kc, vc)  # outgrew 3: regrown, contents kept
    assert k.shape == (1, 2, 7, 4) and cache.capacity >= 7
    assert torch.equal(k, torch.cat([ka, kb, kc], 2)) and torch.equal(v, torch.cat([va, vb, vc], 2))


def test_position_table_grows_by_missing_rows_only() -> None:
    enc = _encoder()
    positions = RelPositionProjections(enc)
    positions.GROW_ROWS = 2  # force several growth steps on a short sequence
    with torch.inference_mode():
        prefill = positions.get(0, 5, 5)  # r = 4 ... -4
        full = enc.encoders[0].self_attn.project_positions(enc.pos_table.vectors(12, torch.device("cpu"),
                                                                                  torch.float32))  # r = 11 ... -11
        assert prefill.shape == (4, 9, 8)
        torch.testing.assert_close(prefill, full[:, 7:16])
        for k in range(6, 13):  # one query per step: r = k-1 ... 0
            step = positions.get(1, k, 1)
            expected = enc.encoders[1].self_attn.project_positions(
                enc.pos_table.vectors(k, torch.device("cpu"), torch.float32))[:, :k]
            torch.testing.assert_close(step, expected)
        assert positions.get(0, 12, 7).shape == (4, 18, 8)  # more queries later: the negative half grows too
        torch.testing.assert_close(positions.get(0, 12, 7), full[:, :18])


def test_decoding_with_a_small_reserve_matches_the_full_pass() -> None:
    enc = _encoder(1)
    xs = torch.randn(1, 30, 16, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        full = enc(xs)
        positions = RelPositionProjections(enc)
        positions.GROW_ROWS = 3
        out, caches = enc.forward_step(xs[:, :4], None, positions, reserve=6)  # caches outgrow 6
        outs = [out]
        for i in range(4, 30):
            out, caches = enc.forward_step(xs[:, i : i + 1], caches, positions)
            outs.append(out)
    assert caches[0].length == 30
    torch.testing.assert_close(torch.cat(outs, dim=1), full, atol=1e-5, rtol=1e-5)
