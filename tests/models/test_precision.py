"""Inference-time transforms: what precision.py applies for stock and fast (via the modules' own methods),
that the stock layout keeps the numbers, that the fast mode stays close, and the linear layouts'
contracts (models/linears.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cosyvoice_ui.cosyvoice import kernels
from cosyvoice_ui.cosyvoice.models.hift import Snake
from cosyvoice_ui.cosyvoice.models.linears import (INT4_GROUP, Int4Linear, PackedLinear, int4_kernels_available,
                                                   onednn_linear_works, pack_linears, quantize_linears_int4)
from cosyvoice_ui.cosyvoice.precision import (FastSettings, apply_precision, bf16_is_native, speed_up_llm,
                                              stock_llm_for_rows, trim_flow_prompt)
from cosyvoice_ui.testing.tiny_model import TinyDims, build_v1_modules, v1_yaml


@pytest.fixture()
def modules():
    """Fresh tiny (llm, flow, hift, config) per test: the transforms work in place."""
    return build_v1_modules(v1_yaml(TinyDims()), seed=3)


def _llm_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 1000, (1, 9), generator=g), torch.randint(0, 1000, (1, 4), generator=g),
            torch.randint(0, 4096, (1, 12), generator=g), torch.randn(1, 192, generator=g),
            torch.randint(0, 4096, (1, 15), generator=g))


def _estimator_inputs(seed: int, frames: int, t: float) -> tuple[torch.Tensor, ...]:
    """x, mu, t, spks, cond for a CFG-sized (batch 2) estimator call."""
    g = torch.Generator().manual_seed(seed)
    x, mu, cond = (torch.randn(2, 80, frames, generator=g) for _ in range(3))
    return x, mu, torch.tensor([t, t]), torch.randn(2, 80, generator=g), cond


def test_column_major_layout_keeps_outputs_and_state_dict(modules) -> None:
    llm = modules[0].eval()
    keys = {k: v.shape for k, v in llm.state_dict().items()}
    with torch.inference_mode():
        before = llm.teacher_forced_logp(*_llm_inputs())
    assert llm.column_major_linears() > 10
    assert not llm.llm.encoders[0].feed_forward.w_1.weight.is_contiguous()  # stored as Wᵀ
    with torch.inference_mode():
        after = llm.teacher_forced_logp(*_llm_inputs())
    assert (after - before).abs().max() < 1e-4
    assert {k: v.shape for k, v in llm.state_dict().items()} == keys
    fresh = build_v1_modules(v1_yaml(TinyDims()), seed=4)[0]
    fresh.load_state_dict(llm.state_dict(), strict=True)  # still saves and loads as before
    assert torch.equal(fresh.llm_decoder.weight, llm.llm_decoder.weight)


@pytest.mark.skipif(not onednn_linear_works(), reason="oneDNN's packed linear is not available here")
def test_packed_linear_matches_linear_and_speed_up_keeps_the_llm_numbers(modules, monkeypatch) -> None:
    monkeypatch.setenv("COSYVOICE_STOCK_ONE_ROW_LAYOUT", "row-major")  # as on the CPUs where that is faster
    linear = nn.Linear(32, 24)
    packed = PackedLinear(linear)
    for shape in ((1, 32), (1, 1, 32), (7, 32), (2, 5, 32)):
        x = torch.randn(*shape)
        with torch.inference_mode():
            torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)
    llm = modules[0].eval()
    with torch.inference_mode():
        before = llm.teacher_forced_logp(*_llm_inputs())
        tokens = list(llm.inference(*_llm_inputs()[:4], sampler=_argmax, max_len=20, ignore_eos=True))
    decoder_weight = llm.llm_decoder.weight
    # One-row steps: plain linears on a private row-major copy of each weight (same values).
    assert speed_up_llm(llm, "cpu").startswith("fp32 (row-major for one-row steps")
    assert type(llm.llm_decoder) is nn.Linear and not llm.has_packed_linears()
    assert llm.llm_decoder.weight.data_ptr() != decoder_weight.data_ptr()
    assert torch.equal(llm.llm_decoder.weight, decoder_weight) and llm.llm_decoder.weight.is_contiguous()
    with torch.inference_mode():
        row_major = llm.teacher_forced_logp(*_llm_inputs())
        assert list(llm.inference(*_llm_inputs()[:4], sampler=_argmax, max_len=20, ignore_eos=True)) == tokens
    assert (row_major - before).abs().max() < 1e-4
    # Several rows a step: oneDNN's packed layout, made once.
    assert stock_llm_for_rows(llm, 1, "cpu") is None
    assert stock_llm_for_rows(llm, 4, "cpu").startswith("fp32 (oneDNN packed")
    assert type(llm.spk_embed_affine_layer) is nn.Linear and isinstance(llm.llm_decoder, PackedLinear)
    assert stock_llm_for_rows(llm, 4, "cpu") is None  # already packed
    with torch.inference_mode():
        after = llm.teacher_forced_logp(*_llm_inputs())
        assert list(llm.inference(*_llm_inputs()[:4], sampler=_argmax, max_len=20, ignore_eos=True)) == tokens
    assert (after - before).abs().max() < 1e-4
    assert pack_linears(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), skip=("0",)) == 0


def test_row_blocks_keep_the_llm_numbers_and_pack_when_the_engine_batches(modules, monkeypatch) -> None:
    from cosyvoice_ui.cosyvoice.models.linears import RowBlocksLinear

    monkeypatch.setenv("COSYVOICE_STOCK_ONE_ROW_LAYOUT", "row-blocks")  # as on the CPUs where that is faster
    llm = modules[0].eval()
    with torch.inference_mode():
        before = llm.teacher_forced_logp(*_llm_inputs())  # many rows a call: oneDNN (or torch) on the blocks
        tokens = list(llm.inference(*_llm_inputs()[:4], sampler=_argmax, max_len=20, ignore_eos=True))
    assert speed_up_llm(llm, "cpu").startswith("fp32 (row blocks for one-row steps")
    assert isinstance(llm.llm_decoder, RowBlocksLinear) and type(llm.spk_embed_affine_layer) is nn.Linear
    assert not llm.has_packed_linears()
    with torch.inference_mode():
        assert (llm.teacher_forced_logp(*_llm_inputs()) - before).abs().max() < 1e-4
        assert list(llm.inference(*_llm_inputs()[:4], sampler=_argmax, max_len=20, ignore_eos=True)) == tokens
    if onednn_linear_works():
        assert stock_llm_for_rows(llm, 4, "cpu").startswith("fp32 (oneDNN packed")
        assert not any(isinstance(m, RowBlocksLinear) for m in llm.modules())
        with torch.inference_mode():
            assert list(llm.inference(*_llm_inputs()[:4], sampler=_argmax, max_len=20, ignore_eos=True)) == tokens


def _argmax(logp, decoded, generator) -> int:
    return int(logp.argmax())


def test_int8_llm_is_close_and_skips_what_it_is_told(modules) -> None:
    llm = modules[0].eval()
    with torch.inference_mode():
        ref = llm.teacher_forced_logp(*_llm_inputs())
    count = llm.quantize_int8()
    assert count > 10
    assert type(llm.spk_embed_affine_layer) is nn.Linear
    assert type(llm.llm_decoder) is not nn.Linear
    with torch.inference_mode():
        low = llm.teacher_forced_logp(*_llm_inputs())
    assert low.shape == ref.shape and torch.isfinite(low).all()
    assert (ref.argmax(-1) == low.argmax(-1)).float().mean() > 0.9
    # Int8 moves the numbers (this test would fail if quantisation silently did nothing).
    assert (ref - low).abs().max() > 1e-5


@pytest.mark.skipif(not bf16_is_native(), reason="this CPU has no native bf16 dot products")
def test_bf16_estimator_is_float32_outside_and_close(modules) -> None:
    estimator = modules[1].estimator.eval()
    x, mu, t, spks, cond = _estimator_inputs(1, 37, 0.3)
    with torch.inference_mode():
        ref = estimator(x, None, mu, t, spks, cond)
        estimator.to_bf16()
        out = estimator(x, None, mu, t, spks, cond)
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert estimator.time_mlp.linear_1.weight.dtype == torch.float32  # t·1000 needs float32
    assert estimator.final_proj.weight.dtype == torch.bfloat16
    rel = ((out - ref).norm() / ref.norm()).item()
    assert 0 < rel < 0.05


def test_trim_flow_prompt_keeps_the_tail_and_the_ratio() -> None:
    tokens = torch.arange(250).unsqueeze(0)
    mel = torch.arange(430).float().reshape(1, 430, 1).expand(1, 430, 80)
    t, m = trim_flow_prompt(tokens, mel, 3.0, token_rate=50)
    assert t.shape == (1, 150) and t[0, -1] == 249 and t[0, 0] == 100
    assert m.shape == (1, 258, 80) and m[0, -1, 0] == 429  # 430 · 150/250 frames, the last ones
    short_t, short_m = trim_flow_prompt(tokens[:, :100], mel[:, :172], 3.0, token_rate=50)
    assert short_t.shape[1] == 100 and short_m.shape[1] == 172


def test_apply_precision_reports_what_it_did(modules) -> None:
    llm, flow, _, _ = modules
    stock = apply_precision(llm, flow, "stock", "cpu")
    assert stock.mode == "stock" and stock.llm.startswith("fp32 (") and stock.flow_steps is None
    with pytest.raises(ValueError, match="stock"):
        apply_precision(llm, flow, "turbo", "cpu")
    llm2, flow2, _, _ = build_v1_modules(v1_yaml(TinyDims()), seed=5)
    fast = apply_precision(llm2, flow2, "fast", "cpu", FastSettings(bf16_estimator=False))
    assert fast.mode == "fast" and fast.llm.startswith("int8") and fast.flow == "fp32" and not fast.bf16_flow
    assert fast.flow_steps == FastSettings().n_timesteps and fast.flow_prompt_seconds == 3.0
    # v1's U-Net has no int8 path (it is convolution-bound): int8_estimator leaves it to bf16 / fp32.
    assert not hasattr(flow2.estimator, "to_int8") and not fast.int8_flow


def test_fused_qkv_keeps_the_llm_numbers_and_tokens(modules) -> None:
    llm = modules[0].eval()
    with torch.inference_mode():
        before = llm.teacher_forced_logp(*_llm_inputs())
        tokens = list(llm.inference(*_llm_inputs()[:4], sampler=_argmax, max_len=20, ignore_eos=True))
    layers = len(llm.llm.encoders) + len(llm.text_encoder.encoders)
    assert llm.fuse_qkv() == layers
    attn = llm.llm.encoders[0].self_attn
    assert attn.linear_qkv is not None and not hasattr(attn, "linear_q")
    assert llm.fuse_qkv() == 0  # already fused: nothing to do
    with torch.inference_mode():
        after = llm.teacher_forced_logp(*_llm_inputs())
        assert list(llm.inference(*_llm_inputs()[:4], sampler=_argmax, max_len=20, ignore_eos=True)) == tokens
    assert (after - before).abs().max() < 1e-4


@pytest.mark.skipif(not bf16_is_native(), reason="this CPU has no native bf16 dot products")
def test_bf16_hift_keeps_f0_and_source_in_float32_and_stays_close(modules) -> None:
    hift = modules[2].eval()
    g = torch.Generator().manual_seed(2)
    mel = torch.randn(1, 80, 23, generator=g) - 4
    with torch.inference_mode():
        ref, ref_source = hift.inference(mel, generator=torch.Generator().manual_seed(3))
        hift.set_conv_dtype(torch.bfloat16)
        out, source = hift.inference(mel, generator=torch.Generator().manual_seed(3))
    assert hift.f0_predictor.condnet[0].weight.dtype == torch.float32
    assert hift.conv_post.weight.dtype == torch.bfloat16
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert torch.equal(source, ref_source)  # the excitation is computed exactly as before
    rel = ((out - ref).norm() / ref.norm()).item()
    assert 0 < rel < 0.1


@pytest.mark.skipif(not bf16_is_native(), reason="this CPU has no native bf16 dot products")
def test_bf16_estimator_matmul_attention_matches_its_sdpa_path(modules) -> None:
    estimator = modules[1].estimator.eval()
    x, mu, t, spks, cond = _estimator_inputs(4, 29, 0.6)
    mask = torch.ones(2, 1, 29)
    mask[1, :, 25:] = 0  # padded frames exercise the key mask
    with torch.inference_mode():
        estimator.to_bf16(matmul_attention=False)
        sdpa = estimator(x, mask, mu, t, spks, cond)
        estimator.to_bf16(matmul_attention=True)  # already bf16: only the attention kernel changes
        matmul = estimator(x, mask, mu, t, spks, cond)
    rel = ((matmul - sdpa).norm() / sdpa.norm()).item()
    assert rel < 0.03 and torch.isfinite(matmul).all()


def test_fast_precision_reports_the_vocoder(modules) -> None:
    llm, flow, hift, _ = modules
    done = apply_precision(llm, flow, "fast", "cpu", FastSettings(bf16_hift=False), hift=hift)
    snake = ", one-pass Snake" if kernels.snake_available() else ""
    assert done.hift == f"fp32, time-major{snake}" and not done.bf16_hift and hift.decode_dtype == torch.float32
    assert hift.time_major and hift.conv_post.weight.stride(1) == 1  # in-channels adjacent: channels-last
    assert all(m.kernel == bool(snake) for m in hift.modules() if isinstance(m, Snake))
    assert "q/k/v fused" in done.llm


def test_fast_precision_changes_the_modules_in_place(modules) -> None:
    llm, flow, hift, _ = modules
    estimator = flow.estimator
    done = apply_precision(llm, flow, "fast", "cpu", FastSettings(), hift=hift)
    assert flow.estimator is estimator  # transformed by its own method, not wrapped
    native = bf16_is_native()
    assert done.bf16_flow == native and done.bf16_hift == native
    assert estimator.compute_dtype == (torch.bfloat16 if native else torch.float32)
    assert hift.decode_dtype == (torch.bfloat16 if native else torch.float32)
    assert done.flow_attention == ("matmul" if native else "sdpa")


@pytest.mark.skipif(not int4_kernels_available(), reason="this torch has no int4 CPU kernel")
def test_int4_linear_is_close_and_keeps_shapes() -> None:
    g = torch.Generator().manual_seed(7)
    linear = nn.Linear(128, 48)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(48, 128, generator=g))
        linear.bias.copy_(torch.randn(48, generator=g))
    one, rows = torch.randn(1, 1, 128, generator=g), torch.randn(2, 5, 128, generator=g)
    int4 = Int4Linear(linear)
    with torch.inference_mode():
        for x, low, high in ((one, 0.01, 0.12), (rows, 1e-4, 0.03)):
            ref, out = linear(x), int4(x)
            assert out.shape == ref.shape and out.dtype == torch.float32
            rel = ((out - ref).norm() / ref.norm()).item()
            # Batch 1 runs the 4-bit weights (16 levels per group of 32: ~6 % on Gaussian weights, never
            # exact); several rows run the int8 copy (~1 %).
            assert low < rel < high, x.shape
    assert Int4Linear.fits(linear) and not Int4Linear.fits(nn.Linear(128, 50)) and not Int4Linear.fits(nn.Linear(100, 48))
    assert INT4_GROUP == 32


@pytest.mark.skipif(not int4_kernels_available(), reason="this torch has no int4 CPU kernel")
def test_int4_quantisation_falls_back_to_int8_where_the_shape_does_not_fit() -> None:
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 50), nn.Linear(50, 16))
    int4, int8 = quantize_linears_int4(model)
    assert (int4, int8) == (1, 2)
    assert isinstance(model[0], Int4Linear) and not isinstance(model[2], (Int4Linear, nn.Linear))
    with torch.inference_mode():
        assert model(torch.randn(3, 64)).shape == (3, 16)


def test_int4_llm_agrees_with_float_often(modules) -> None:
    if not int4_kernels_available():
        pytest.skip("this torch has no int4 CPU kernel")
    llm = modules[0].eval()
    with torch.inference_mode():
        ref = llm.teacher_forced_logp(*_llm_inputs())
        llm.fuse_qkv()
        int4, _ = llm.quantize_int4()
        low = llm.teacher_forced_logp(*_llm_inputs())
    assert int4 > 0 and torch.isfinite(low).all()
    assert (ref.argmax(-1) == low.argmax(-1)).float().mean() > 0.6
    assert (ref - low).abs().max() > 1e-4  # it did change the numbers


@pytest.mark.parametrize("bf16_attention", [False, True])
def test_int8_dit_is_float32_outside_and_close(bf16_attention: bool) -> None:
    if bf16_attention and not bf16_is_native():
        pytest.skip("this CPU has no native bf16 dot products")
    from ..conftest import fixture_dir

    from cosyvoice_ui.cosyvoice.config import parse_v3, read_yaml
    from cosyvoice_ui.cosyvoice.models.estimators.dit import DiT

    cfg = parse_v3(read_yaml(fixture_dir("cosyvoice3-tiny") / "cosyvoice3.yaml")).flow.cfm.estimator
    torch.manual_seed(0)
    dit = DiT(cfg).eval()
    g = torch.Generator().manual_seed(2)
    frames = 30
    x, mu, cond = (torch.randn(2, cfg.mel_dim, frames, generator=g) for _ in range(3))
    spks, t = torch.randn(2, cfg.mel_dim, generator=g), torch.tensor([0.3, 0.3])
    with torch.inference_mode():
        ref = dit(x, None, mu, t, spks, cond)
        count = dit.to_int8(bf16_attention=bf16_attention)
        out = dit(x, None, mu, t, spks, cond)
    assert count > 0 and out.dtype == torch.float32 and out.shape == ref.shape
    assert isinstance(dit.time_embed.time_mlp[0], nn.Linear)  # t·1000 stays float32
    rel = ((out - ref).norm() / ref.norm()).item()
    assert 0 < rel < 0.08


# --- where the CPU has matrix units (AMX): bf16 DiT, oneDNN int8 prefill rows ---------------------------------

def _tiny_dit():
    from ..conftest import fixture_dir

    from cosyvoice_ui.cosyvoice.config import parse_v3, read_yaml
    from cosyvoice_ui.cosyvoice.models.estimators.dit import DiT

    cfg = parse_v3(read_yaml(fixture_dir("cosyvoice3-tiny") / "cosyvoice3.yaml")).flow.cfm.estimator
    torch.manual_seed(0)
    return DiT(cfg).eval()


@pytest.mark.parametrize("matrix_units", [False, True])
def test_fast_dit_is_bf16_where_the_cpu_has_matrix_units_else_int8(monkeypatch, matrix_units: bool) -> None:
    from types import SimpleNamespace

    from cosyvoice_ui.cosyvoice import precision

    if not bf16_is_native():
        pytest.skip("this CPU has no native bf16 dot products")
    monkeypatch.setattr(precision, "bf16_matrix_units", lambda: matrix_units)
    dit = _tiny_dit()
    flow = SimpleNamespace(estimator=dit, decoder=SimpleNamespace(inference_cfg_rate=0.7))
    done = precision.flow_precision(flow, "fast", "cpu")
    if matrix_units:
        assert done["flow"] == "bf16 estimator"
    else:
        # float32 SDPA (issue 26), a stream's kept keys/values in bf16
        assert done["flow"].startswith("int8 estimator (") and done["flow_attention"] == "sdpa"
        assert not dit.transformer_blocks[0].attn.matmul_attention
        assert dit.transformer_blocks[0].attn.kept_dtype == torch.bfloat16
    assert dit.compute_dtype == (torch.bfloat16 if matrix_units else torch.float32)
    # Asked not to use int8, a CPU without matrix units gets bf16 too.
    monkeypatch.setattr(precision, "bf16_matrix_units", lambda: False)
    assert not precision.int8_estimator_wanted(FastSettings(int8_estimator=False), _tiny_dit(), "cpu")
    assert not precision.int8_estimator_wanted(FastSettings(), _tiny_dit(), "cuda")


def test_dit_keeps_its_modulations_per_time_with_the_same_numbers() -> None:
    dit = _tiny_dit()
    cfg = dit.cfg
    g = torch.Generator().manual_seed(4)
    x, mu, cond = (torch.randn(2, cfg.mel_dim, 20, generator=g) for _ in range(3))
    spks = torch.randn(2, cfg.mel_dim, generator=g)
    t = torch.tensor([0.25, 0.25])
    with torch.no_grad():
        with torch.enable_grad():
            uncached = dit(x, None, mu, t, spks, cond).detach()  # a gradient wanted: nothing kept
        assert not dit._modulation_cache
        first = dit(x, None, mu, t, spks, cond)
        assert len(dit._modulation_cache) == 1
        again = dit(x, None, mu, t, spks, cond)
        other_time = dit(x, None, mu, torch.tensor([0.75, 0.75]), spks, cond)
    assert torch.equal(first, uncached) and torch.equal(again, uncached)
    assert len(dit._modulation_cache) == 2 and not torch.allclose(other_time, first)
    # New weights for the modulation linears (a reload): the kept chunks are not reused.
    with torch.no_grad():
        for block in dit.transformer_blocks:
            block.attn_norm.linear.weight.mul_(2.0)
        changed = dit(x, None, mu, t, spks, cond)
        with torch.enable_grad():
            fresh = dit(x, None, mu, t, spks, cond).detach()
    assert torch.equal(changed, fresh) and not torch.allclose(changed, first)
    with torch.no_grad():
        for step in range(40):  # bounded
            dit(x, None, mu, torch.full((2,), step / 40), spks, cond)
    assert len(dit._modulation_cache) <= 32


def _int8_layer(in_features: int = 64, out_features: int = 48, seed: int = 0) -> tuple[nn.Linear, nn.Module]:
    from cosyvoice_ui.cosyvoice.models.linears import quantize_linears_int8

    g = torch.Generator().manual_seed(seed)
    float_layer = nn.Linear(in_features, out_features)
    with torch.no_grad():
        float_layer.weight.copy_(torch.randn(out_features, in_features, generator=g) * 0.1)
        float_layer.bias.copy_(torch.randn(out_features, generator=g))
    import copy

    holder = nn.Sequential(copy.deepcopy(float_layer))
    quantize_linears_int8(holder)
    return float_layer, holder[0]


def test_onednn_rows_take_many_rows_and_leave_few_to_fbgemm() -> None:
    from cosyvoice_ui.cosyvoice.models.linears import INT8_ONEDNN_MIN_ROWS, Int8RowsOnOneDNN, int8_matrix_units

    if not int8_matrix_units():
        pytest.skip("this CPU has no int8 matrix units (AMX) for oneDNN")
    float_layer, dynamic = _int8_layer()
    g = torch.Generator().manual_seed(1)
    few = torch.randn(1, INT8_ONEDNN_MIN_ROWS - 1, 64, generator=g)
    many = torch.randn(2, 3 * INT8_ONEDNN_MIN_ROWS, 64, generator=g)
    with torch.inference_mode():
        fbgemm_few, fbgemm, exact = dynamic(few), dynamic(many), float_layer(many)
    keys = set(dynamic.state_dict())
    wrapped = Int8RowsOnOneDNN.adopt(dynamic)
    assert wrapped is dynamic and set(wrapped.state_dict()) == keys  # the layer itself, its keys unchanged
    with torch.inference_mode():
        assert torch.equal(wrapped(few), fbgemm_few)  # decoding-sized calls: fbgemm, the same numbers
        ours = wrapped(many)
    assert ours.shape == exact.shape == (2, 3 * INT8_ONEDNN_MIN_ROWS, 48) and ours.dtype == torch.float32
    assert not torch.equal(ours, fbgemm)  # the rows did go elsewhere
    scale = exact.abs().max()
    # Its activations keep 8 bits (fbgemm's 7), so it is at least as close to float32.
    assert (ours - exact).abs().max() / scale < 0.03
    assert (ours - exact).abs().mean() <= (fbgemm - exact).abs().mean() * 1.05
    import copy

    copied = copy.deepcopy(wrapped)  # oneDNN's packed weights are opaque: the copy packs its own
    assert type(copied) is Int8RowsOnOneDNN and copied.weight_packed is not wrapped.weight_packed
    assert type(wrapped) is Int8RowsOnOneDNN and copied.min_rows == wrapped.min_rows
    with torch.inference_mode():
        assert torch.equal(copied(many), ours) and torch.equal(copied(few), fbgemm_few)


def test_fast_llm_takes_onednn_rows_only_where_asked_and_keeps_its_tokens(modules, monkeypatch) -> None:
    from cosyvoice_ui.cosyvoice import precision
    from cosyvoice_ui.cosyvoice.models.linears import Int8RowsOnOneDNN, int8_matrix_units

    if not int8_matrix_units():
        pytest.skip("this CPU has no int8 matrix units (AMX) for oneDNN")
    llm, flow, _, _ = modules
    record = apply_precision(llm, flow, "fast", "cpu")
    wrapped = [m for m in llm.modules() if isinstance(m, Int8RowsOnOneDNN)]
    assert wrapped and record.llm_rows.startswith("oneDNN int8") and f"({len(wrapped)} linears)" in record.llm_rows
    with torch.inference_mode():
        tokens = list(llm.eval().inference(*_llm_inputs()[:4], sampler=_argmax, max_len=12, ignore_eos=True))
    assert len(tokens) == 12
    llm2, flow2, _, _ = build_v1_modules(v1_yaml(TinyDims()), seed=3)
    off = apply_precision(llm2, flow2, "fast", "cpu", FastSettings(onednn_int8_rows=False))
    assert off.llm_rows == "" and not any(isinstance(m, Int8RowsOnOneDNN) for m in llm2.modules())
    monkeypatch.setenv(precision.ONEDNN_ROWS_ENV, "0")  # a memory-tight host's switch
    llm4, flow4, _, _ = build_v1_modules(v1_yaml(TinyDims()), seed=3)
    assert apply_precision(llm4, flow4, "fast", "cpu").llm_rows == ""
    assert not any(isinstance(m, Int8RowsOnOneDNN) for m in llm4.modules())
    monkeypatch.delenv(precision.ONEDNN_ROWS_ENV)
    monkeypatch.setattr(precision, "int8_matrix_units", lambda: False)
    llm3, flow3, _, _ = build_v1_modules(v1_yaml(TinyDims()), seed=3)
    rows = apply_precision(llm3, flow3, "fast", "cpu").llm_rows  # without AMX: the own kernel where built, or fbgemm
    assert not rows.startswith("oneDNN") and not any(isinstance(m, Int8RowsOnOneDNN) for m in llm3.modules())
    assert rows.startswith("own int8 kernel") if kernels.int8_linear_available() else rows == ""


def test_the_one_row_layout_follows_the_cpu_and_can_be_forced(monkeypatch) -> None:
    from cosyvoice_ui.cosyvoice.models import linears

    monkeypatch.delenv(linears.ONE_ROW_LAYOUT_ENV, raising=False)
    assert isinstance(linears.cpu_vendor(), str)  # "" where /proc/cpuinfo says nothing
    monkeypatch.setattr(linears, "onednn_linear_works", lambda: True)
    monkeypatch.setattr(linears, "cpu_vendor", lambda: "GenuineIntel")
    assert linears.one_row_layout() == "row-major"  # MKL's GEMV on row-major weights was faster there
    monkeypatch.setattr(linears, "cpu_vendor", lambda: "AuthenticAMD")
    assert linears.one_row_layout() == "row-blocks"  # MKL's GEMV runs on one thread there
    monkeypatch.setattr(linears, "cpu_vendor", lambda: "")
    assert linears.one_row_layout() == "row-blocks"
    for forced in linears.ONE_ROW_LAYOUTS:
        monkeypatch.setenv(linears.ONE_ROW_LAYOUT_ENV, f" {forced.upper()} ")
        assert linears.one_row_layout() == forced
    monkeypatch.setenv(linears.ONE_ROW_LAYOUT_ENV, "nonsense")  # not a layout: the CPU decides
    assert linears.one_row_layout() == "row-blocks"
    monkeypatch.setenv(linears.ONE_ROW_LAYOUT_ENV, "packed")
    monkeypatch.setattr(linears, "onednn_linear_works", lambda: False)
    assert linears.one_row_layout() == "row-major"  # no oneDNN: nothing to pack with


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("out_features", [24, 29])  # 29: padded to whole blocks
def test_row_blocks_linear_matches_linear_for_one_row_and_many(bias: bool, out_features: int, monkeypatch) -> None:
    from cosyvoice_ui.cosyvoice.models import linears

    torch.manual_seed(0)
    linear = nn.Linear(40, out_features, bias=bias).requires_grad_(False)
    blocks = linears.RowBlocksLinear(linear)
    assert blocks.weight_blocks.shape == (linears.ROW_BLOCKS, -(-out_features // 8), 40)
    assert blocks.weight_blocks.data_ptr() != linear.weight.data_ptr()  # a private copy, not the file's pages
    assert not blocks.state_dict()  # an inference layout, never saved
    for onednn in (linears.onednn_linear_works(), False):  # many rows on oneDNN where it works, else torch's
        monkeypatch.setattr(linears, "onednn_linear_works", lambda onednn=onednn: onednn)
        for shape in ((1, 40), (1, 1, 40), (40,), (7, 40), (2, 5, 40)):
            x = torch.randn(*shape)
            with torch.inference_mode():
                y = blocks(x)
            assert y.shape == shape[:-1] + (out_features,)
            torch.testing.assert_close(y, linear(x), atol=1e-5, rtol=1e-5)
    plain = blocks.to_linear()
    assert type(plain) is nn.Linear and torch.equal(plain.weight, linear.weight)
    assert plain.weight.data_ptr() == blocks.weight_blocks.data_ptr()  # a view: going back costs no copy
    # A traced step records the path of its row count, with the same numbers as eager.
    monkeypatch.undo()
    for shape in ((1, 1, 40), (3, 1, 40)):
        x = torch.randn(*shape)
        with torch.inference_mode():
            traced = torch.jit.trace(blocks, (x,), check_trace=False)
            assert torch.equal(traced(x), blocks(x))
    # Packing (a batching engine) turns blocks into packed layers; unpacking gives plain ones back.
    model = nn.Sequential(linears.RowBlocksLinear(linear), nn.ReLU())
    if linears.onednn_linear_works():
        assert linears.pack_linears(model) == 1 and isinstance(model[0], linears.PackedLinear)
    else:
        assert linears.unpack_linears(model) == 1 and type(model[0]) is nn.Linear


def test_stock_packs_the_flow_estimator_with_the_same_numbers() -> None:
    import copy
    from types import SimpleNamespace

    from cosyvoice_ui.cosyvoice import precision
    from cosyvoice_ui.cosyvoice.models.linears import onednn_linear_works, unpack_linears

    if not onednn_linear_works():
        pytest.skip("oneDNN's packed linear is not available here")
    dit = _tiny_dit()
    plain = copy.deepcopy(dit)
    frames, cfg = 12, dit.cfg
    g = torch.Generator().manual_seed(1)
    args = (torch.randn(2, cfg.mel_dim, frames, generator=g), None, torch.randn(2, cfg.mu_dim, frames, generator=g),
            torch.tensor([0.3, 0.3]), torch.randn(2, cfg.spk_dim, generator=g),
            torch.randn(2, cfg.mel_dim, frames, generator=g))
    flow = SimpleNamespace(estimator=dit)
    done = precision.flow_precision(flow, "stock", "cpu")
    linears = [m for m in dit.modules() if isinstance(m, PackedLinear)]
    assert done["flow"] == f"fp32 (oneDNN packed estimator, {len(linears)} linears)" and linears
    assert not any(isinstance(m, nn.Linear) for m in dit.modules())
    assert precision.flow_precision(SimpleNamespace(estimator=_tiny_dit()), "stock", "cuda") == {}
    with torch.inference_mode():
        expected = plain(*args)
        torch.testing.assert_close(dit(*args), expected, atol=1e-5, rtol=1e-5)
        # A copy (benchmarks convert one to int8 or bf16) packs again; unpacked, it is the plain module exactly.
        copied = copy.deepcopy(dit)
        torch.testing.assert_close(copied(*args), dit(*args), atol=0, rtol=0)
        assert unpack_linears(copied) == len(linears)
        assert all(torch.equal(a, b) for a, b in zip(copied.state_dict().values(), plain.state_dict().values()))
    # Converting a stock estimator further (benchmarks do) starts from the plain linears.
    converted = copy.deepcopy(dit)
    assert converted.to_int8() > 0 and not any(isinstance(m, PackedLinear) for m in converted.modules())


@pytest.mark.skipif(not onednn_linear_works(), reason="oneDNN's packed inner product is not available here")
@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_packed_linears_fuse_a_gelu_and_unfuse_to_the_same_keys(dtype: torch.dtype, tolerance: float) -> None:
    import copy

    from cosyvoice_ui.cosyvoice.models.fused_linears import fuse_linear_gelus
    from cosyvoice_ui.cosyvoice.models.linears import unpack_linears

    torch.manual_seed(5)  # test-only: the layers' own initialisation
    model = nn.Sequential(nn.Sequential(nn.Linear(16, 32), nn.GELU(approximate="tanh")),
                          nn.Sequential(nn.Linear(32, 32), nn.GELU()),
                          nn.Sequential(nn.Linear(32, 8), nn.ReLU()),  # not a GELU: left alone
                          nn.Sequential(nn.Linear(8, 8), nn.GELU())).to(dtype).eval()
    keys = set(model.state_dict())
    x = torch.randn(3, 5, 16).to(dtype)
    with torch.inference_mode():
        expected = model(x).float()
    assert fuse_linear_gelus(model, skip=("3",)) == 2  # the last pair is skipped by name
    assert [getattr(m, "activation", None) for m in model] == ["gelu_tanh", "gelu", None, None]
    assert isinstance(model[0], PackedLinear) and isinstance(model[3], nn.Sequential)
    with torch.inference_mode():
        fused = model(x)
        copied = copy.deepcopy(model)(x)  # a copy packs its own weights, activation included
    assert fused.dtype == dtype and torch.equal(copied, fused)
    assert float((fused.float() - expected).abs().max()) <= tolerance * float(expected.abs().max())
    assert unpack_linears(model) == 2
    assert set(model.state_dict()) == keys and model[0][1].approximate == "tanh" and model[0][0].weight.dtype == dtype
    with pytest.raises(ValueError, match="unknown fused activation"):
        PackedLinear(nn.Linear(4, 4), "swish")


@pytest.mark.parametrize("precision", ["stock", "fast"])
def test_a_cpu_load_records_the_flows_layouts(precision: str, tiny_v3) -> None:
    """v3's DiT on a CPU: time-major position convolutions in every precision; fast's bf16 estimator with its
    feed-forwards' GELU fused where oneDNN can (recorded, and the layers are the fused ones)."""
    from cosyvoice_ui import load_engine
    from cosyvoice_ui.cosyvoice.models.fused_linears import onednn_fused_gelu_works

    engine = load_engine(tiny_v3, device="cpu", precision=precision)
    record = engine.info.precision.flow
    estimator = engine.flow.estimator
    assert ", time-major convolutions" in record and estimator.input_embed.conv_pos_embed.conv1[0].time_major
    fused = precision == "fast" and record.startswith("bf16") and onednn_fused_gelu_works(torch.bfloat16)
    depth = len(estimator.transformer_blocks)
    assert (f"GELU fused ({depth} linears)" in record) is fused
    assert all(isinstance(b.ff.ff[0], PackedLinear) is fused for b in estimator.transformer_blocks)
