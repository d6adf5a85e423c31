"""The project's decoding-attention kernel (kernels/decode_attention.cpp) and where the LLMs use it: its reference
arithmetic against torch's own attention forms, the kernel against the reference (strided caches, tails in the key
count and the head width, shared key heads, v1's relative positions, saturated softmaxes), its input checks, each
attention module's one-query step with and without it, and the fast tiny v1/v3 engines on it. Where the kernels
cannot be built the kernel tests skip with the reason and the reference tests still run."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from cosyvoice_ui import load_engine
from cosyvoice_ui.cosyvoice import kernels
from cosyvoice_ui.cosyvoice.config import Qwen2Config
from cosyvoice_ui.cosyvoice.kernels import reference_decode_attention
from cosyvoice_ui.cosyvoice.models.decode_cache import KVCache
from cosyvoice_ui.cosyvoice.models.qwen2 import Qwen2Attention
from cosyvoice_ui.cosyvoice.models.transformer import RelPositionMultiHeadedAttention


@pytest.fixture
def kernel_built() -> None:
    """Skips where the kernel cannot be built or loaded; built once per process when the first test asks."""
    if not kernels.decode_attention_available():
        pytest.skip(f"the decoding kernels are not available here: {kernels.why_not_built() or 'build failed'}")


needs_kernel = pytest.mark.usefixtures("kernel_built")


def _cache_view(heads: int, keys: int, width: int, generator: torch.Generator, spare: int = 7) -> torch.Tensor:
    """[heads, keys, width] as a decode's cache holds it: the first `keys` rows of a longer buffer (strided heads)."""
    return torch.randn(heads, keys + spare, width, generator=generator)[:, :keys]


def test_the_reference_is_grouped_query_attention_as_torch_computes_it() -> None:
    g = torch.Generator().manual_seed(0)
    query, keys, values = torch.randn(6, 16, generator=g), _cache_view(2, 11, 16, g), _cache_view(2, 11, 16, g)
    expected = F.scaled_dot_product_attention(query[None, :, None], keys[None], values[None], enable_gqa=True)
    assert torch.allclose(reference_decode_attention(query, keys, values, None, None, 0.25), expected[0, :, 0],
                          atol=1e-6)


def test_the_reference_is_v1s_relative_position_step() -> None:
    """score = ((q+u).k + (q+v).p) / sqrt(Dk): what RelPositionMultiHeadedAttention's own torch form computes."""
    g = torch.Generator().manual_seed(1)
    attention = RelPositionMultiHeadedAttention(4, 64).eval()  # 4 heads of 16
    query, position_query = torch.randn(1, 4, 1, 16, generator=g), torch.randn(1, 4, 1, 16, generator=g)
    keys, values, positions = (_cache_view(4, 9, 16, g) for _ in range(3))
    with torch.inference_mode():
        expected = attention._attend_one_query(query, position_query, keys[None], values[None], positions)
    got = reference_decode_attention(query[0, :, 0], keys, values, position_query[0, :, 0], positions, 0.25)
    assert torch.allclose(got, expected[0, :, 0], atol=1e-6)


SHAPES = [(16, 16, 64, 1), (16, 16, 64, 17), (16, 16, 64, 435), (14, 2, 64, 440), (14, 2, 64, 33), (4, 1, 8, 5),
          (8, 2, 128, 100), (6, 3, 24, 70), (4, 2, 80, 16), (5, 5, 16, 15)]  # heads, key heads, width, keys


@needs_kernel
@pytest.mark.parametrize("heads,key_heads,width,keys,with_positions",
                         [(*shape, False) for shape in SHAPES]
                         + [(*shape, True) for shape in SHAPES if shape[0] == shape[1]])  # positions: v1, no groups
def test_the_kernel_equals_its_reference(heads: int, key_heads: int, width: int, keys: int,
                                         with_positions: bool) -> None:
    g = torch.Generator().manual_seed(heads * 1000 + keys)
    key_rows, value_rows = _cache_view(key_heads, keys, width, g), _cache_view(key_heads, keys, width, g)
    query = torch.randn(heads, width, generator=g) * 2
    position_query = torch.randn(heads, width, generator=g) if with_positions else None
    positions = _cache_view(heads, keys, width, g, spare=3) if with_positions else None
    scale = 1 / math.sqrt(width)
    with torch.inference_mode():
        out = torch.ops.cosyvoice_kernels.decode_attention(query, key_rows, value_rows, position_query, positions, scale)
    expected = reference_decode_attention(query, key_rows, value_rows, position_query, positions, scale)
    assert out.shape == (heads, width) and out.dtype == torch.float32
    assert torch.allclose(out, expected, rtol=1e-5, atol=5e-6), float((out - expected).abs().max())


@needs_kernel
@pytest.mark.parametrize("heads,key_heads,width,keys", [(16, 16, 64, 435), (14, 2, 64, 33), (6, 3, 24, 70)])
def test_the_kernel_reads_a_bf16_cache_as_its_float_values(heads: int, key_heads: int, width: int, keys: int) -> None:
    """Keys, values and positions kept in bf16 (fast mode's caches): the same result as their exact float32 values."""
    g = torch.Generator().manual_seed(keys)
    key_rows, value_rows = (_cache_view(key_heads, keys, width, g).bfloat16() for _ in range(2))
    query, position_query = torch.randn(heads, width, generator=g), torch.randn(heads, width, generator=g)
    positions = _cache_view(heads, keys, width, g).bfloat16() if heads == key_heads else None
    if positions is None:
        position_query = None
    out = torch.ops.cosyvoice_kernels.decode_attention(query, key_rows, value_rows, position_query, positions, 0.125)
    expected = reference_decode_attention(query, key_rows.float(), value_rows.float(), position_query,
                                          None if positions is None else positions.float(), 0.125)
    assert torch.allclose(out, expected, rtol=1e-5, atol=5e-6), float((out - expected).abs().max())
    with pytest.raises(RuntimeError, match="values must be BFloat16 like the keys"):
        torch.ops.cosyvoice_kernels.decode_attention(query, key_rows, value_rows.float(), None, None, 0.125)


@needs_kernel
def test_saturated_scores_give_a_finite_softmax() -> None:
    """Scores hundreds apart: the largest key takes all the weight, the rest underflow to 0, nothing is NaN."""
    g = torch.Generator().manual_seed(3)
    keys, values = _cache_view(2, 50, 64, g), _cache_view(2, 50, 64, g)
    query = torch.randn(4, 64, generator=g) * 60
    out = torch.ops.cosyvoice_kernels.decode_attention(query, keys, values, None, None, 1.0)
    expected = reference_decode_attention(query, keys, values, None, None, 1.0)
    assert bool(torch.isfinite(out).all())
    assert torch.allclose(out, expected, rtol=1e-5, atol=5e-6)


@needs_kernel
def test_the_kernel_says_what_is_wrong_with_its_inputs() -> None:
    op = torch.ops.cosyvoice_kernels.decode_attention
    query, keys = torch.randn(4, 16), torch.randn(2, 5, 16)
    with pytest.raises(RuntimeError, match="cannot share"):
        op(torch.randn(3, 16), keys, keys, None, None, 1.0)
    with pytest.raises(RuntimeError, match="rows have width 16, the queries 8"):
        op(torch.randn(4, 8), keys, keys, None, None, 1.0)
    with pytest.raises(RuntimeError, match="rows must be contiguous"):
        op(query, keys.transpose(1, 2).contiguous().transpose(1, 2), keys, None, None, 1.0)
    with pytest.raises(RuntimeError, match="come together"):
        op(query, keys, keys, query, None, 1.0)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        op(query, keys.double(), keys.double(), None, None, 1.0)
    with pytest.raises(RuntimeError, match="at least one key"):
        op(query, keys[:, :0], keys[:, :0], None, None, 1.0)


@needs_kernel
def test_v1s_attention_step_is_the_same_on_the_kernel() -> None:
    torch.manual_seed(4)
    attention = RelPositionMultiHeadedAttention(4, 64).eval()
    with torch.no_grad():
        attention.pos_bias_u.normal_()
        attention.pos_bias_v.normal_()
    x = torch.randn(1, 1, 64)
    keys, values = torch.randn(1, 4, 30, 16), torch.randn(1, 4, 30, 16)
    positions = attention.project_positions(torch.randn(30, 64)).contiguous()
    with torch.inference_mode():
        eager = attention.step(x, positions, keys.clone(), values.clone())
        attention.kernel_attention = True
        kernel = attention.step(x, positions, keys.clone(), values.clone())
    assert torch.allclose(kernel, eager, atol=2e-6), float((kernel - eager).abs().max())


@needs_kernel
def test_qwen2s_attention_step_is_the_same_on_the_kernel() -> None:
    """A cached step through `forward` and a batch of rows through `forward_rows`, with and without the kernel."""
    torch.manual_seed(5)
    config = Qwen2Config(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=1, vocab_size=32)
    attention = Qwen2Attention(config).eval()
    prefill, step = torch.randn(1, 20, 64), torch.randn(1, 1, 64)
    cos, sin = torch.randn(21, 16), torch.randn(21, 16)
    outputs = {}
    with torch.inference_mode():
        for on_kernel in (False, True):
            attention.kernel_attention = on_kernel
            cache = KVCache(32)
            attention(prefill, cos[:20], sin[:20], cache)
            one = attention(step, cos[20:], sin[20:], cache)
            keys, values = cache.views_with_next()
            rows = attention.forward_rows(torch.cat([step, step]), cos[None, 20:].expand(2, 1, 16),
                                          sin[None, 20:].expand(2, 1, 16), [keys, keys.clone()],
                                          [values, values.clone()])
            outputs[on_kernel] = (one, rows)
    assert torch.allclose(outputs[True][0], outputs[False][0], atol=2e-6)
    assert torch.allclose(outputs[True][1], outputs[False][1], atol=2e-6)
    assert torch.allclose(outputs[True][1][0], outputs[True][1][1])  # each row over its own cache


@needs_kernel
@pytest.mark.parametrize("family", ["v1", "v3"])
def test_the_fast_engines_decode_on_the_kernel(family: str, request, monkeypatch) -> None:
    """Where built and a decode's cache is large, fast mode turns it on (recorded) with bf16 caches, the recorded
    step holds it, and decoding's log-probabilities (teacher-forced through the steps) stay those of torch's
    attention: within float rounding with float32 caches, within bf16's rounding with bf16 caches."""
    import dataclasses

    from cosyvoice_ui.cosyvoice import precision
    from cosyvoice_ui.cosyvoice.precision import settings_for

    folder = request.getfixturevalue("tiny_base" if family == "v1" else "tiny_v3")
    default = load_engine(folder, device="cpu", precision="fast")
    per_position = default.llm.llm.cache_bytes_per_position()
    assert per_position < precision.LARGE_CACHE_BYTES  # a tiny model's cache: torch's attention by default
    assert default.info.precision.llm_attention == ""
    assert not any(getattr(m, "kernel_attention", False) for m in default.llm.llm.modules())
    monkeypatch.setattr(precision, "LARGE_CACHE_BYTES", per_position)  # as large as the rule asks
    engines = {name: load_engine(folder, device="cpu", precision="fast",
                                 fast=dataclasses.replace(settings_for("fast"), **switches))
               for name, switches in (("bf16", {}), ("fp32", {"bf16_decode_cache": False}),
                                      ("torch", {"kernel_attention": False}))}
    record = engines["bf16"].info.precision.llm_attention
    assert record.startswith("own kernel, bf16 cache")
    assert engines["fp32"].info.precision.llm_attention.startswith("own kernel, one pass")
    assert engines["torch"].info.precision.llm_attention == ""
    for name, engine in engines.items():
        layers = [m for m in engine.llm.llm.modules() if hasattr(m, "kernel_attention")]
        assert layers and all(m.kernel_attention is (name != "torch") for m in layers)
        assert engine.llm.has_decode_step()  # recorded again after the switch
    cache = engines["bf16"].llm.llm.new_cache(reserve=8)
    engines["bf16"].llm.llm.forward_step(torch.zeros(1, 3, engines["bf16"].llm.speech_embedding.weight.size(1)), cache)
    assert cache.layers[0].view().dtype == torch.bfloat16
    logp = {name: _stepped_logp(engine) for name, engine in engines.items()}
    assert float((logp["fp32"] - logp["torch"]).abs().max()) < 1e-4
    bf16_gap = float((logp["bf16"] - logp["torch"]).abs().max())
    assert 0 < bf16_gap < 0.3  # bf16 keys move the scores by ~0.4 % of their size; random tiny weights, 37-nat spread
    assert float((logp["bf16"].argmax(-1) == logp["torch"].argmax(-1)).float().mean()) >= 0.9


def test_a_probe_that_fails_keeps_torchs_attention(monkeypatch) -> None:
    """A broken build whose op raises in its probe: not used, and no error reaches the engine's load."""
    monkeypatch.setattr(kernels, "built", lambda: True)
    monkeypatch.setattr(kernels, "_probe_decode_attention", lambda: (_ for _ in ()).throw(RuntimeError("bad op")))
    assert kernels.decode_attention_available.__wrapped__() is False
    monkeypatch.setattr(kernels, "_probe_decode_attention", lambda: False)
    assert kernels.decode_attention_available.__wrapped__() is False


def test_a_decodes_cache_size_by_family(tiny_base, tiny_v3) -> None:
    """Float32 bytes a decode keeps a position: v1 each layer's keys, values and projected positions (all heads),
    Qwen2 its shared key heads' keys and values (the full-size models: v1 168 KiB, v2/v3 24 KiB)."""
    v1, v3 = load_engine(tiny_base, device="cpu").llm.llm, load_engine(tiny_v3, device="cpu").llm.llm
    assert v1.cache_bytes_per_position() == v1.cfg.num_blocks * 3 * v1.cfg.output_size * 4  # from its config
    q = v3.cfg
    assert v3.cache_bytes_per_position() == q.num_hidden_layers * 2 * q.num_key_value_heads * q.head_width * 4
    assert q.num_key_value_heads < q.num_attention_heads  # shared key heads: less than the per-head count


def _stepped_logp(engine) -> torch.Tensor:
    """A fixed random prompt and 20 continuation tokens through the engine's decoding path (`stepped_logp`)."""
    lm = engine.llm
    g = torch.Generator().manual_seed(6)
    text, prompt_text = torch.randint(1, 50, (1, 8), generator=g), torch.randint(1, 50, (1, 3), generator=g)
    marker = getattr(lm, "endofprompt_id", None)  # v3 wants <|endofprompt|> in the prompt text
    if marker is not None:
        prompt_text[0, -1] = marker
    speech = torch.randint(0, lm.speech_token_size, (1, 30), generator=g)
    continuation = torch.randint(0, lm.speech_token_size, (1, 20), generator=g)
    embedding = torch.randn(1, 192, generator=g) if engine.folder.family.name == "v1" else None
    return lm.stepped_logp(text, prompt_text, speech, embedding, continuation)
