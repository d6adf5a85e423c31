"""Qwen2 backbone and the Qwen-based speech LLMs: config, strict load, golden parity on the v2 and v3
tiny fixtures (teacher forcing, greedy, seeded RAS), decoding rules and shapes on random tiny models."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from cosyvoice_ui.cosyvoice.checkpoint import load_strict, read_state_dict
from cosyvoice_ui.cosyvoice.config import Qwen2Config, QwenLMConfig
from cosyvoice_ui.cosyvoice.models.llm_qwen import CosyVoice3LM, Qwen2LM, drop_long_silences
from cosyvoice_ui.cosyvoice.models.qwen2 import Qwen2Encoder
from cosyvoice_ui.cosyvoice.models.sampling import RasSampler, greedy
from cosyvoice_ui.cosyvoice.parity.qwen import greedy_run
from cosyvoice_ui.errors import CheckpointError, ConfigError

from ..conftest import fixture_dir

SPEECH_TOKENS = 6561  # the yaml's speech_token_size in both fixtures
FIXTURES = {"cosyvoice2-tiny": Qwen2LM, "cosyvoice3-tiny": CosyVoice3LM}
CASES = [
    ("cosyvoice2-tiny", "A_zero_shot"),
    ("cosyvoice2-tiny", "B_no_prompt_speech"),
    ("cosyvoice3-tiny", "A_zero_shot"),
    ("cosyvoice3-tiny", "B_cross_lingual"),
    ("cosyvoice3-tiny", "C_instruct2"),
    ("cosyvoice3-tiny", "D_eos_before_min_len"),
]
TF_CASES = [c for c in CASES if c[1] != "D_eos_before_min_len"]  # D has no teacher-forced goldens
# Tolerances from the fixtures' READMEs
TOL_LM_INPUT, TOL_HIDDEN, TOL_LOGP = 1e-6, 1e-4, 2e-4


# ---------------------------------------------------------------------------------------------
# Fixture models and goldens


def _config(folder: Path) -> QwenLMConfig:
    qwen = Qwen2Config.from_json(folder / "CosyVoice-BlankEN")
    return QwenLMConfig(llm_input_size=qwen.hidden_size, llm_output_size=qwen.hidden_size,
                        speech_token_size=SPEECH_TOKENS, qwen=qwen)


def _load(name: str) -> nn.Module:
    folder = fixture_dir(name)
    model = FIXTURES[name](_config(folder))
    load_strict(model, read_state_dict(folder / "llm.pt"), "llm.pt")
    return model.eval()


_MODELS: dict[str, nn.Module] = {}
_GOLDENS: dict[str, dict[str, torch.Tensor]] = {}


def model_for(name: str) -> nn.Module:
    if name not in _MODELS:
        _MODELS[name] = _load(name)
    return _MODELS[name]


def case_goldens(name: str, case: str) -> dict[str, torch.Tensor]:
    if name not in _GOLDENS:
        _GOLDENS[name] = load_file(str(fixture_dir(name) / "llm_goldens.safetensors"))
    return {k.split(".", 1)[1]: v for k, v in _GOLDENS[name].items() if k.startswith(case + ".")}


def stages(name: str) -> dict:
    return json.loads((fixture_dir(name) / "manifest.json").read_text())["stages"]


def _inputs(g: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
    return g["text"], g["prompt_text"], g["prompt_speech_token"], g.get("embedding")


def _max_diff(actual: torch.Tensor, expected: torch.Tensor) -> float:
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    return (actual.float() - expected.float()).abs().max().item() if actual.numel() else 0.0


def _assert_close(name: str, actual: torch.Tensor, expected: torch.Tensor, atol: float) -> None:
    diff = _max_diff(actual, expected)
    assert diff <= atol, f"{name}: max abs diff {diff:.3e} > {atol:.0e}"


# ---------------------------------------------------------------------------------------------
# Config and strict loading


def test_qwen2_config_is_read_from_the_blanken_folder() -> None:
    v2 = Qwen2Config.from_json(fixture_dir("cosyvoice2-tiny") / "CosyVoice-BlankEN")
    assert (v2.vocab_size, v2.hidden_size, v2.intermediate_size, v2.num_hidden_layers) == (4096, 48, 128, 2)
    assert (v2.num_attention_heads, v2.num_key_value_heads, v2.head_width) == (4, 2, 12)
    assert v2.rope_theta == 1e6 and v2.rms_norm_eps == 1e-6 and v2.tie_word_embeddings
    v3 = Qwen2Config.from_json(fixture_dir("cosyvoice3-tiny") / "CosyVoice-BlankEN" / "config.json")
    assert (v3.vocab_size, v3.hidden_size, v3.num_attention_heads, v3.num_key_value_heads) == (151936, 8, 2, 1)


def test_qwen2_config_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    base = json.loads((fixture_dir("cosyvoice2-tiny") / "CosyVoice-BlankEN" / "config.json").read_text())
    with pytest.raises(ConfigError, match="hidden_act"):
        Qwen2Config.from_dict({**base, "hidden_act": "gelu"})
    with pytest.raises(ConfigError, match="sliding"):
        Qwen2Config.from_dict({**base, "use_sliding_window": True})
    with pytest.raises(ConfigError, match="key/value heads"):
        Qwen2Config.from_dict({**base, "num_key_value_heads": 3})
    with pytest.raises(ConfigError, match="vocab_size"):
        Qwen2Config.from_dict({k: v for k, v in base.items() if k != "vocab_size"})
    with pytest.raises(ConfigError, match="missing"):
        Qwen2Config.from_json(tmp_path)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_llm_pt_loads_strictly(name: str) -> None:
    folder = fixture_dir(name)
    sd = read_state_dict(folder / "llm.pt")
    model = FIXTURES[name](_config(folder))
    load_strict(model, sd, "llm.pt")
    assert set(model.state_dict()) == set(sd)
    qwen = model.llm.model
    assert qwen.lm_head.weight is qwen.model.embed_tokens.weight  # tied: one table in memory
    fresh = FIXTURES[name](_config(folder))
    with pytest.raises(CheckpointError, match="unexpected"):
        load_strict(fresh, {**sd, "llm.extra.weight": torch.zeros(1)}, "llm.pt")
    with pytest.raises(CheckpointError, match="missing"):
        load_strict(fresh, {k: v for k, v in sd.items() if k != "llm.model.model.norm.weight"}, "llm.pt")


def test_the_two_checkpoints_do_not_load_into_each_other() -> None:
    for name, other in itertools.permutations(FIXTURES):
        with pytest.raises(CheckpointError):
            load_strict(FIXTURES[name](_config(fixture_dir(name))), read_state_dict(fixture_dir(other) / "llm.pt"),
                        "llm.pt")


def test_untied_embeddings_get_their_own_head() -> None:
    model = Qwen2Encoder(_tiny_qwen(tie=False))
    assert model.model.lm_head.weight is not model.model.model.embed_tokens.weight
    assert "model.lm_head.weight" in model.state_dict()


# ---------------------------------------------------------------------------------------------
# Golden parity


@pytest.mark.parametrize("name,case", TF_CASES)
def test_teacher_forced_goldens(name: str, case: str) -> None:
    model, g = model_for(name), case_goldens(name, case)
    text, prompt_text, prompt_speech, embedding = _inputs(g)
    with torch.inference_mode():
        lm_input = model.build_input(text, prompt_text, torch.cat([prompt_speech, g["tf_continuation"]], dim=1))
        hidden = model.llm(g["tf_lm_input"])
    _assert_close("tf_lm_input", lm_input, g["tf_lm_input"], TOL_LM_INPUT)
    _assert_close("tf_hidden", hidden, g["tf_hidden"], TOL_HIDDEN)
    logp = model.teacher_forced_logp(text, prompt_text, prompt_speech, embedding, g["tf_continuation"])
    _assert_close("tf_logp", logp, g["tf_logp"], TOL_LOGP)


def _greedy_run(model: nn.Module, g: dict[str, torch.Tensor]) -> tuple[list[int], list[int], list[torch.Tensor]]:
    """(yielded tokens, every pick incl. a stopping one, every step's log-probs as the sampler saw them),
    as the parity command records them."""
    return greedy_run(model, _inputs(g))


@pytest.mark.parametrize("name,case", CASES)
def test_greedy_decode_matches(name: str, case: str) -> None:
    model, g, meta = model_for(name), case_goldens(name, case), stages(name)["llm"][case]
    tokens, picks, rows = _greedy_run(model, g)
    n = meta.get("greedy_robust_prefix_len", meta["greedy_len"])
    assert tokens[:n] == g["greedy_tokens"][0, :n].tolist()
    assert len(tokens) == meta["greedy_len"]
    stopped_on = picks[-1] if picks[-1] >= SPEECH_TOKENS else None
    assert stopped_on == meta["greedy_stop_token"]
    assert (meta["min_len"], meta["max_len"]) == model.length_limits(g["text"].size(1))
    if "greedy_chosen_logp" in g:
        m = min(len(picks), g["greedy_chosen_logp"].numel())
        chosen = torch.tensor([rows[i][picks[i]].item() for i in range(m)])
        _assert_close("greedy_chosen_logp", chosen, g["greedy_chosen_logp"][:m], TOL_LOGP)
    if "greedy_step_logp" in g:  # unmasked goldens: compare where our min-length mask left values
        ours, ref = torch.stack(rows), g["greedy_step_logp"]
        finite = torch.isfinite(ours)
        assert (~finite).sum() == min(len(rows), meta["min_len"])  # only index S, only before min_len
        _assert_close("greedy_step_logp", ours[finite], ref[finite], TOL_LOGP)


def test_eos_can_end_a_cosyvoice3_decode_before_min_len() -> None:
    # The upstream quirk kept: the min-length mask hits index S (SOS in this table), not EOS S+1.
    g, meta = case_goldens("cosyvoice3-tiny", "D_eos_before_min_len"), stages("cosyvoice3-tiny")["llm"]
    model = model_for("cosyvoice3-tiny")
    tokens, picks, rows = _greedy_run(model, g)
    assert len(tokens) < meta["D_eos_before_min_len"]["min_len"]
    assert picks[-1] == model.eos == SPEECH_TOKENS + 1
    assert all(row[SPEECH_TOKENS] == float("-inf") for row in rows)


RAS_CASES = [c for c in CASES if c[1] != "D_eos_before_min_len"]


@pytest.mark.parametrize("name,case", RAS_CASES)
def test_seeded_ras_reproduces_upstream_tokens(name: str, case: str) -> None:
    model, g, meta = model_for(name), case_goldens(name, case), stages(name)["llm"][case]
    global_state = torch.random.get_rng_state()
    gen = torch.Generator().manual_seed(meta["ras_seed"])
    tokens = list(model.inference(*_inputs(g), sampler=RasSampler.from_config(model.cfg.sampling), generator=gen))
    assert tokens == g["ras_tokens"][0].tolist()
    assert len(tokens) == meta["ras_len"]
    assert torch.equal(torch.random.get_rng_state(), global_state)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_incremental_logp_matches_teacher_forcing(name: str) -> None:
    model, g = model_for(name), case_goldens(name, "A_zero_shot")  # its continuation is the greedy output
    _, _, rows = _greedy_run(model, g)
    n = g["tf_continuation"].size(1)
    tf = model.teacher_forced_logp(*_inputs(g), g["tf_continuation"])
    steps = torch.stack(rows[: n + 1])
    finite = torch.isfinite(steps)  # index S is masked in the first min_len steps
    _assert_close("cached vs full pass", steps[finite], tf[finite], 1e-4)
    # `stepped_logp` (what deviation.py measures fast mode with) is the decode's own path: the same rows
    _assert_close("stepped vs full pass", model.stepped_logp(*_inputs(g), g["tf_continuation"]), tf, 1e-4)


def test_cosyvoice3_needs_endofprompt_in_the_text() -> None:
    model, g = model_for("cosyvoice3-tiny"), case_goldens("cosyvoice3-tiny", "B_cross_lingual")
    text = g["text"].clone()
    text[text == model.endofprompt_id] = 7
    with pytest.raises(ValueError, match="endofprompt"):
        model.inference(text, g["prompt_text"], g["prompt_speech_token"], None, sampler=greedy)


def test_silent_token_filter_matches_upstream() -> None:
    golden = stages("cosyvoice3-tiny")["orchestration"]["silent_token_filter"]
    model = model_for("cosyvoice3-tiny")
    assert model.silent_tokens == frozenset(golden["silent_tokens"])
    assert model.max_silent_run == golden["max_consecutive_kept"]
    assert list(model.tokens_for_flow(golden["llm_output"])) == golden["tokens_passed_to_flow"]
    assert list(model_for("cosyvoice2-tiny").tokens_for_flow(golden["llm_output"])) == golden["llm_output"]
    assert list(drop_long_silences([1, 1, 1, 4, 1], frozenset({1}), 1)) == [1, 4, 1]


# ---------------------------------------------------------------------------------------------
# Decoding rules and shapes on random tiny models

TINY_S = 20  # speech tokens in the tiny models


def _tiny_qwen(tie: bool = True) -> Qwen2Config:
    return Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, rope_theta=1e4, tie_word_embeddings=tie)


def _tiny(cls: type, seed: int = 0, **kwargs) -> nn.Module:
    model = cls(QwenLMConfig(16, 16, TINY_S, _tiny_qwen()), **kwargs).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model


def _tiny_inputs(n_text: int = 4, n_prompt: int = 3, n_speech: int = 5) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(1)
    return (torch.randint(0, 64, (1, n_text), generator=gen), torch.randint(0, 64, (1, n_prompt), generator=gen),
            torch.randint(0, TINY_S, (1, n_speech), generator=gen), torch.zeros(0, 192))


@pytest.mark.parametrize("cls,vocab,sos_row,task_row", [(Qwen2LM, TINY_S + 3, None, None),
                                                        (CosyVoice3LM, TINY_S + 200, TINY_S, TINY_S + 2)])
@pytest.mark.parametrize("n_prompt,n_speech", [(3, 5), (0, 0), (2, 0), (0, 4)])
def test_build_input_shapes(cls: type, vocab: int, sos_row: int | None, task_row: int | None,
                            n_prompt: int, n_speech: int) -> None:
    model = _tiny(cls, endofprompt_id=None) if cls is CosyVoice3LM else _tiny(cls)
    assert model.llm_decoder.out_features == model.speech_embedding.num_embeddings == vocab
    assert (model.llm_decoder.bias is not None) == (cls is Qwen2LM)
    with torch.inference_mode():
        x = model.build_input(*_tiny_inputs(4, n_prompt, n_speech)[:3])
        logp = model.teacher_forced_logp(*_tiny_inputs(4, n_prompt, n_speech), torch.tensor([[1, 2]]))
    assert x.shape == (1, 1 + n_prompt + 4 + 1 + n_speech, 16)
    assert logp.shape == (3, vocab)
    table = model.llm_embedding.weight if sos_row is None else model.speech_embedding.weight
    assert torch.equal(x[0, 0], table[0 if sos_row is None else sos_row])
    assert torch.equal(x[0, -1 - n_speech], table[1 if task_row is None else task_row])


def _picks(first: int):
    """A sampler that picks `first` whenever it is allowed, else the most likely speech token."""
    def sampler(logp: torch.Tensor, decoded: list[int], gen: torch.Generator | None) -> int:
        return first if torch.isfinite(logp[first]) else greedy(logp[:TINY_S], decoded, gen)
    return sampler


@pytest.mark.parametrize("cls", [Qwen2LM, CosyVoice3LM])
def test_min_len_masks_only_index_s_and_any_special_stops(cls: type) -> None:
    kwargs = {"endofprompt_id": None} if cls is CosyVoice3LM else {}
    model = _tiny(cls, **kwargs)
    inputs = _tiny_inputs(n_text=4)
    assert model.length_limits(4) == (8, 80)
    assert len(list(model.inference(*inputs, sampler=_picks(TINY_S)))) == 8  # S allowed from step 8
    assert len(list(model.inference(*inputs, sampler=_picks(TINY_S), min_len=0))) == 0
    for special in (TINY_S + 1, model.decoder_vocab - 1):  # not masked: stops at once
        assert len(list(model.inference(*inputs, sampler=_picks(special)))) == 0
    assert list(model.stop_token_ids) == list(range(TINY_S, model.decoder_vocab))


@pytest.mark.parametrize("cls", [Qwen2LM, CosyVoice3LM])
def test_ignore_eos_gives_exactly_max_len_speech_tokens(cls: type) -> None:
    kwargs = {"endofprompt_id": None} if cls is CosyVoice3LM else {}
    model = _tiny(cls, **kwargs)
    tokens = list(model.inference(*_tiny_inputs(), sampler=_picks(TINY_S + 1), ignore_eos=True, max_len=23))
    assert len(tokens) == 23 and all(0 <= t < TINY_S for t in tokens)


def test_early_stop_is_a_prefix_and_ras_is_seeded() -> None:
    model = _tiny(Qwen2LM)
    full = list(model.inference(*_tiny_inputs(), sampler=greedy, ignore_eos=True, max_len=30))
    it = model.inference(*_tiny_inputs(), sampler=greedy, ignore_eos=True, max_len=30)
    assert list(itertools.islice(it, 7)) == full[:7]
    it.close()
    sampler = RasSampler.from_config(model.cfg.sampling)
    global_state = torch.random.get_rng_state()

    def run(seed: int) -> list[int]:
        gen = torch.Generator().manual_seed(seed)
        return list(model.inference(*_tiny_inputs(), sampler=sampler, generator=gen, ignore_eos=True, max_len=40))

    assert run(5) == run(5) != run(6)
    list(model.inference(*_tiny_inputs(), sampler=sampler, max_len=10))  # generator=None: a private one
    assert torch.equal(torch.random.get_rng_state(), global_state)

    class FakeGenerator:
        device = torch.device("meta")

    with pytest.raises(ValueError, match="CPU"):
        model.inference(*_tiny_inputs(), sampler=greedy, generator=FakeGenerator())  # type: ignore[arg-type]


def _naive_qwen(enc: Qwen2Encoder, x: torch.Tensor) -> torch.Tensor:
    """A straightforward full-sequence reference: repeated K/V heads, explicit softmax, causal mask."""
    m, cfg = enc.model.model, enc.cfg
    t, dh = x.size(1), cfg.head_width
    pos = torch.arange(t, dtype=torch.float64)[:, None]
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
    ang = torch.cat([pos * inv, pos * inv], dim=-1)
    cos, sin = ang.cos().float(), ang.sin().float()

    def rope(v: torch.Tensor) -> torch.Tensor:
        half = dh // 2
        return v * cos + torch.cat([-v[..., half:], v[..., :half]], dim=-1) * sin

    def norm(v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return w * v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps)

    group = cfg.num_attention_heads // cfg.num_key_value_heads
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    for layer in m.layers:
        a = layer.self_attn
        h = norm(x, layer.input_layernorm.weight)
        q = rope(a.q_proj(h).view(1, t, -1, dh).transpose(1, 2))
        k = rope(a.k_proj(h).view(1, t, -1, dh).transpose(1, 2)).repeat_interleave(group, dim=1)
        v = a.v_proj(h).view(1, t, -1, dh).transpose(1, 2).repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-1, -2) / dh ** 0.5).masked_fill(~causal, float("-inf"))
        x = x + a.o_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(1, t, -1))
        h = norm(x, layer.post_attention_layernorm.weight)
        x = x + layer.mlp.down_proj(torch.nn.functional.silu(layer.mlp.gate_proj(h)) * layer.mlp.up_proj(h))
    return norm(x, m.norm.weight)


def test_backbone_matches_a_naive_reference_and_the_cached_steps_match_the_full_pass() -> None:
    enc = _tiny(Qwen2LM).llm
    xs = torch.randn(1, 40, 16, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        full = enc(xs)
        _assert_close("ours vs naive", full, _naive_qwen(enc, xs), 1e-5)
        cache = enc.new_cache()  # no reserve: every buffer grows from its first call's size
        outs = [enc.forward_step(xs[:, :5], cache)]
        for i in range(5, 30):
            outs.append(enc.forward_step(xs[:, i : i + 1], cache))
        outs.append(enc.forward_step(xs[:, 30:], cache))  # several new queries after a cache (masked)
    assert cache.length == 40 and cache.layers[0].view().shape == (1, 2, 40, 8)  # G = 2 heads cached
    _assert_close("cached steps vs full", torch.cat(outs, dim=1), full, 1e-5)


def test_inference_layouts_keep_shapes_and_skip_the_unused_head() -> None:
    from cosyvoice_ui.cosyvoice.models.linears import onednn_linear_works

    args = (*_tiny_inputs(), torch.randint(0, TINY_S, (1, 6), generator=torch.Generator().manual_seed(3)))
    with torch.inference_mode():
        ref = _tiny(Qwen2LM, seed=7).teacher_forced_logp(*args)
    # per layer q, k, v (or the fused qkv), o, gate, up, down; plus llm_decoder; lm_head is skipped
    unfused, fused = 2 * 7 + 1, 2 * 5 + 1
    layouts = [((), "column_major_linears", unfused, 1e-5), (("fuse_qkv",), "quantize_int8", fused, None),
               (("fuse_qkv",), "column_major_linears", fused, 1e-5), (("fuse_qkv",), "row_blocks_linears", fused, 1e-4)]
    if onednn_linear_works():
        layouts.append((("fuse_qkv",), "pack_linears", fused, 1e-4))
    for before, method, count, atol in layouts:
        model = _tiny(Qwen2LM, seed=7)
        for step in before:
            assert getattr(model, step)() == 2 and getattr(model, step)() == 0  # per layer, once
        assert getattr(model, method)() == count, method
        qwen = model.llm.model
        assert qwen.lm_head.weight is qwen.model.embed_tokens.weight, method
        with torch.inference_mode():
            out = model.teacher_forced_logp(*args)
            steps = list(model.inference(*_tiny_inputs(), sampler=greedy, ignore_eos=True, max_len=5))
        assert out.shape == ref.shape == (7, TINY_S + 3) and torch.isfinite(out).all(), method
        assert len(steps) == 5
        if atol is not None:
            _assert_close(f"{before} {method}", out, ref, atol)


@pytest.mark.parametrize("layout", ["row-blocks", "packed", "row-major"])
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_stock_speed_up_keeps_the_golden_greedy_tokens(name: str, layout: str, monkeypatch) -> None:
    from cosyvoice_ui.cosyvoice.models.linears import ONE_ROW_LAYOUT_ENV
    from cosyvoice_ui.cosyvoice.precision import speed_up_llm

    monkeypatch.setenv(ONE_ROW_LAYOUT_ENV, layout)  # each CPU's one-row layout, whatever this CPU is
    model, g = _load(name), case_goldens(name, "A_zero_shot")
    speed_up_llm(model, "cpu")  # what stock precision does to a loaded LLM: fused q/k/v, then a CPU layout
    assert model.llm.fuse_qkv() == 0
    tokens, _, _ = _greedy_run(model, g)
    assert tokens == g["greedy_tokens"][0].tolist()
    tf = model.teacher_forced_logp(*_inputs(g), g["tf_continuation"])
    _assert_close("tf_logp after speed-up", tf, g["tf_logp"], TOL_LOGP)
