"""models/transformer.py and its decoding caches (models/decode_cache.py): the preallocated KV cache, the
projected-position table, incremental decoding, and the fused q/k/v projection."""

from __future__ import annotations

import pytest
import torch

from cosyvoice_ui.cosyvoice.config import EncoderConfig
from cosyvoice_ui.cosyvoice.models.decode_cache import DecodeCache, KVCache, RelPositionProjections
from cosyvoice_ui.cosyvoice.models.transformer import Encoder, EspnetRelPositionTable, RelPositionMultiHeadedAttention


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


def test_sinusoid_table_starts_small_grows_on_demand_and_matches_upstreams_5000_rows() -> None:
    cpu = torch.device("cpu")
    upstream = EspnetRelPositionTable(64, initial_len=5000)  # upstream's precomputed size
    table = EspnetRelPositionTable(64, initial_len=4)
    assert table.max_len == 4
    for key_len in (1, 3, 4, 5, 9, 700, 20):
        got = table.vectors(key_len, cpu, torch.float32)
        assert got.shape == (2 * key_len - 1, 64)
        assert torch.equal(got, upstream.vectors(key_len, cpu, torch.float32)), key_len  # bit for bit
    assert table.max_len == 700  # doubled (4 → 8 → 16) until a request outgrew the doubling
    assert EspnetRelPositionTable(1024).max_len <= 256  # not upstream's 40 MB at D = 1024


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
        cache = DecodeCache(enc, reserve=6)  # the KV buffers outgrow 6
        cache.positions.GROW_ROWS = 3
        outs = [enc.forward_step(xs[:, :4], cache)]
        for i in range(4, 30):
            outs.append(enc.forward_step(xs[:, i : i + 1], cache))
    assert cache.length == 30 and cache.layers[0].length == 30 and cache.layers[0].capacity >= 30
    torch.testing.assert_close(torch.cat(outs, dim=1), full, atol=1e-5, rtol=1e-5)


def test_fused_qkv_attention_keeps_shapes_and_outputs() -> None:
    torch.manual_seed(3)
    attn = RelPositionMultiHeadedAttention(4, 32, key_bias=False).eval()  # a missing key bias fuses as zeros
    x = torch.randn(2, 7, 32)
    pos = attn.project_positions(torch.randn(13, 32))  # r = 6 ... -6 for 7 queries and keys
    mask = torch.ones(2, 7, 7, dtype=torch.bool).tril()
    with torch.inference_mode():
        before = attn(x, mask, pos)
        assert attn.fuse_qkv() and not attn.fuse_qkv()  # fused once; a second call does nothing
        after = attn(x, mask, pos)
    assert attn.linear_qkv.weight.shape == (96, 32) and not hasattr(attn, "linear_q")
    assert after.shape == before.shape == (2, 7, 32)
    torch.testing.assert_close(after, before, atol=1e-6, rtol=1e-5)


def _explicit_attention(attn: RelPositionMultiHeadedAttention, x: torch.Tensor, mask: torch.Tensor,
                        pos: torch.Tensor) -> torch.Tensor:
    """Upstream's form, written out: scores = (q_u·kᵀ + rel-shifted q_v·pᵀ) / sqrt(Dk), masked softmax, zeros for
    a query that sees no key, then the value sum and the output projection."""
    q, k, v = (attn._heads(lin(x)) for lin in (attn.linear_q, attn.linear_k, attn.linear_v))
    position = attn._rel_shift(torch.matmul(q + attn.pos_bias_v.unsqueeze(1), pos.transpose(-2, -1)), k.size(2))
    scores = (torch.matmul(q + attn.pos_bias_u.unsqueeze(1), k.transpose(-2, -1)) + position) / attn.d_k ** 0.5
    keep = mask.unsqueeze(1)
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1).masked_fill(~keep, 0.0)
    out = torch.matmul(weights, v).transpose(1, 2).reshape(x.size(0), x.size(1), -1)
    return attn.linear_out(out)


def test_attention_with_the_bias_in_the_fused_kernel_matches_upstreams_form_and_keeps_keyless_rows_zero() -> None:
    torch.manual_seed(6)
    attn = RelPositionMultiHeadedAttention(4, 32).eval()
    x = torch.randn(2, 7, 32)
    pos = attn.project_positions(torch.randn(13, 32))
    causal = torch.ones(2, 7, 7, dtype=torch.bool).tril()
    padded = causal.clone()
    padded[1, :, 5:] = False  # row 1's last two frames are padding: every query still sees a key
    keyless = padded.clone()
    keyless[1, 2] = False  # query 2 of row 1 sees no key at all
    with torch.inference_mode():
        for mask in (causal, padded):  # the fused kernel's path
            torch.testing.assert_close(attn(x, mask, pos), _explicit_attention(attn, x, mask, pos),
                                       atol=1e-6, rtol=1e-5)
        out = attn(x, keyless, pos)  # upstream's explicit path, whose second fill gives zeros
        # (Close, not equal: a causal mask's position product has only the K columns r >= 0.)
        torch.testing.assert_close(out, _explicit_attention(attn, x, keyless, pos), atol=1e-6, rtol=1e-5)
        assert torch.equal(out[1, 2], attn.linear_out.bias)  # zero attention, then the projection's bias
        assert torch.isfinite(out).all()


def test_encoder_fuse_qkv_counts_its_layers_and_keeps_decoding() -> None:
    enc = _encoder(4)
    xs = torch.randn(1, 9, 16, generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        full = enc(xs)
        assert enc.fuse_qkv() == 2 and enc.fuse_qkv() == 0
        cache = DecodeCache(enc)
        steps = torch.cat([enc.forward_step(xs[:, :3], cache)] +
                          [enc.forward_step(xs[:, i : i + 1], cache) for i in range(3, 9)], dim=1)
    assert steps.shape == full.shape == (1, 9, 32)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)


def test_one_query_step_matches_upstreams_written_out_form() -> None:
    """A decoding step (one query, every key visible) takes its own two batched products; its numbers match
    upstream's explicit form on the same cached keys, values and position rows."""
    torch.manual_seed(7)
    attn = RelPositionMultiHeadedAttention(4, 32).eval()
    x = torch.randn(1, 9, 32)
    pos = attn.project_positions(torch.randn(17, 32))  # r = 8 ... -8
    with torch.inference_mode():
        q, k, v = (attn._heads(lin(x)) for lin in (attn.linear_q, attn.linear_k, attn.linear_v))
        keys, values = torch.zeros(1, 4, 12, 8), torch.zeros(1, 4, 12, 8)  # a cache with spare slots (strided views)
        keys[:, :, :9], values[:, :, :9] = k, v
        step = attn._attend_and_project(q[:, :, -1:], keys[:, :, :9], values[:, :, :9], pos[:, :9], None)
        everything = torch.ones(1, 9, 9, dtype=torch.bool)
        expected = _explicit_attention(attn, x, everything, pos)[:, -1:]  # the last query, as a full pass sees it
    assert step.shape == (1, 1, 32)
    torch.testing.assert_close(step, expected, atol=1e-6, rtol=1e-5)
    # The position term is read at the right rows: one row off changes the answer.
    with torch.inference_mode():
        shifted = attn._attend_and_project(q[:, :, -1:], keys[:, :, :9], values[:, :, :9], pos[:, 1:10], None)
    assert not torch.allclose(shifted, expected, atol=1e-4)


def test_a_causal_mask_needs_only_the_non_negative_distances() -> None:
    """Under a causal mask (a prefill, a causal full pass) the position products cover r = K-1 ... 0 only, and
    the answer is upstream's; any other mask still asks for every distance it may see."""
    torch.manual_seed(8)
    attn = RelPositionMultiHeadedAttention(4, 32).eval()
    x = torch.randn(2, 7, 32)
    pos = attn.project_positions(torch.randn(13, 32))  # r = 6 ... -6
    causal = torch.ones(2, 7, 7, dtype=torch.bool).tril()
    padded = causal.clone()
    padded[1, :, 5:] = False  # padding on top of causality: still no later key visible
    with torch.inference_mode():
        for mask in (causal, padded):
            expected = _explicit_attention(attn, x, mask, pos)
            torch.testing.assert_close(attn(x, mask, pos[:, :7]), expected, atol=1e-6, rtol=1e-5)  # r >= 0 only
            torch.testing.assert_close(attn(x, mask, pos), expected, atol=1e-6, rtol=1e-5)  # extra rows unread
        assert RelPositionMultiHeadedAttention._is_causal(causal, 7, 7)
        assert not RelPositionMultiHeadedAttention._is_causal(torch.ones(1, 7, 7, dtype=torch.bool), 7, 7)
        assert not RelPositionMultiHeadedAttention._is_causal(None, 7, 7)
        with pytest.raises(AssertionError, match="13 needed"):  # a full mask on half the rows: refused
            attn(x, torch.ones(2, 7, 7, dtype=torch.bool), pos[:, :7])


def test_causal_prefills_project_only_the_non_negative_distances() -> None:
    """A decode's prefill and a causal full pass project r = T-1 ... 0 (T rows per layer), not all 2T-1."""
    enc = _encoder(9)
    projected: list[int] = []
    enc.encoders[0].self_attn.linear_pos.register_forward_hook(lambda m, args, out: projected.append(args[0].size(0)))
    xs = torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(10))
    with torch.inference_mode():
        enc.forward_step(xs, DecodeCache(enc))
        assert projected == [5]
        enc(xs)
    assert projected == [5, 5]
