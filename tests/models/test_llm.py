"""v1 TransformerLM: strict load, golden parity (teacher forcing, greedy, seeded RAS), decoding rules."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cosyvoice_ui.cosyvoice.checkpoint import read_state_dict
from cosyvoice_ui.cosyvoice.config import EncoderConfig, LLMConfig, SamplingConfig, parse_v1, read_yaml
from cosyvoice_ui.cosyvoice.parity.common import sampled_tokens_agree
from cosyvoice_ui.errors import CheckpointError
from cosyvoice_ui.cosyvoice.families import V1
from cosyvoice_ui.cosyvoice.models.decode_cache import DecodeCache
from cosyvoice_ui.cosyvoice.models.llm import TransformerLM
from cosyvoice_ui.cosyvoice.models.sampling import RasSampler, greedy
from cosyvoice_ui.cosyvoice.registry import backend_for

CASES = ["A_zero_shot", "B_sft", "C_instruct"]


# ---------------------------------------------------------------------------------------------
# Golden parity on the tiny upstream-generated fixture


@pytest.fixture(scope="module")
def fixture_llm(v1_fixture: Path) -> TransformerLM:
    cfg = parse_v1(read_yaml(v1_fixture / "cosyvoice.yaml")).llm
    return backend_for(V1).load_llm(cfg, read_state_dict(v1_fixture / "llm.pt"))


@pytest.fixture(scope="module")
def goldens(v1_fixture: Path) -> dict[str, torch.Tensor]:
    return load_file(str(v1_fixture / "llm_goldens.safetensors"))


@pytest.fixture(scope="module")
def stages(v1_fixture: Path) -> dict:
    return json.loads((v1_fixture / "manifest.json").read_text())["stages"]["llm"]


def _case(goldens: dict[str, torch.Tensor], case: str) -> dict[str, torch.Tensor]:
    return {k.split(".", 1)[1]: v for k, v in goldens.items() if k.startswith(case + ".")}


def _inputs(g: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return g["text"], g["prompt_text"], g["prompt_speech_token"], g["embedding"]


def _assert_close(name: str, actual: torch.Tensor, expected: torch.Tensor, atol: float) -> None:
    assert actual.shape == expected.shape, f"{name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    diff = (actual.float() - expected.float()).abs().max().item()
    assert diff <= atol, f"{name}: max abs diff {diff:.3e} > {atol:.0e}"


def test_llm_pt_loads_strictly(v1_fixture: Path) -> None:
    cfg = parse_v1(read_yaml(v1_fixture / "cosyvoice.yaml")).llm
    sd = read_state_dict(v1_fixture / "llm.pt")
    load_llm = backend_for(V1).load_llm
    model = load_llm(cfg, sd)
    assert set(model.state_dict()) == set(sd)
    assert not model.training
    with pytest.raises(CheckpointError, match="unexpected"):
        load_llm(cfg, {**sd, "llm.extra.weight": torch.zeros(1)})
    with pytest.raises(CheckpointError, match="missing"):
        load_llm(cfg, {k: v for k, v in sd.items() if k != "llm_decoder.bias"})


@pytest.mark.parametrize("case", CASES)
def test_teacher_forced_goldens(fixture_llm: TransformerLM, goldens: dict, case: str) -> None:
    g = _case(goldens, case)
    text, prompt_text, prompt_speech, embedding = _inputs(g)
    with torch.inference_mode():
        speech = torch.cat([prompt_speech, g["tf_continuation"]], dim=1)
        lm_input = fixture_llm.build_input(text, prompt_text, speech, embedding)
        encoded = fixture_llm.encode_text(torch.cat([prompt_text, text], dim=1))
        hidden = fixture_llm.llm(g["tf_lm_input"])
    _assert_close("tf_lm_input", lm_input, g["tf_lm_input"], 1e-5)
    _assert_close("tf_text_encoded", encoded, g["tf_text_encoded"], 1e-4)
    _assert_close("tf_hidden", hidden, g["tf_hidden"], 1e-4)
    logp = fixture_llm.teacher_forced_logp(text, prompt_text, prompt_speech, embedding, g["tf_continuation"])
    _assert_close("tf_logp", logp, g["tf_logp"], 1e-4)


def test_instruct_case_has_no_speaker_slot(fixture_llm: TransformerLM, goldens: dict) -> None:
    g = _case(goldens, "C_instruct")
    assert g["embedding"].shape == (0, 192)
    text, prompt_text, prompt_speech, embedding = _inputs(g)
    with torch.inference_mode():
        x = fixture_llm.build_input(text, prompt_text, prompt_speech, embedding)
    # SOS + text (prompt included) + TASK, nothing for the speaker
    assert x.size(1) == 1 + prompt_text.size(1) + text.size(1) + 1


@pytest.mark.parametrize("case", CASES)
def test_greedy_decode_matches(fixture_llm: TransformerLM, goldens: dict, stages: dict, case: str) -> None:
    g, meta = _case(goldens, case), stages[case]
    chosen: list[float] = []

    def recording_greedy(logp: torch.Tensor, decoded: list[int], gen: torch.Generator | None) -> int:
        token = greedy(logp, decoded, gen)
        chosen.append(logp[token].item())
        return token

    tokens = list(fixture_llm.inference(*_inputs(g), sampler=recording_greedy))
    n = meta["greedy_robust_prefix_len"]
    assert tokens[:n] == g["greedy_tokens"][0, :n].tolist()
    assert len(tokens) == meta["greedy_len"]
    m = min(len(chosen), g["greedy_chosen_logp"].numel())
    _assert_close("greedy_chosen_logp", torch.tensor(chosen[:m]), g["greedy_chosen_logp"][:m], 1e-4)


@pytest.mark.parametrize("case", CASES)
def test_seeded_ras_reproduces_upstream_tokens(fixture_llm: TransformerLM, goldens: dict, stages: dict,
                                               case: str) -> None:
    g, meta = _case(goldens, case), stages[case]
    global_state = torch.random.get_rng_state()
    gen = torch.Generator().manual_seed(meta["ras_seed"])
    sampler = RasSampler.from_config(fixture_llm.cfg.sampling)
    tokens = list(fixture_llm.inference(*_inputs(g), sampler=sampler, generator=gen))
    expected = g["ras_tokens"][0].tolist()
    assert torch.equal(torch.random.get_rng_state(), global_state)
    # Exact where the floats are; a late sampling flip to a token ours could draw too (parity.sampled_tokens_agree).
    text, prompt_text, prompt_speech, embedding = _inputs(g)

    def logp_after(n: int) -> torch.Tensor:
        with torch.inference_mode():
            return fixture_llm.teacher_forced_logp(text, prompt_text, prompt_speech, embedding,
                                                   torch.tensor([expected[:n]], dtype=torch.long))[n]

    agree, why = sampled_tokens_agree(tokens, expected, sampler.top_k, logp_after)
    assert agree, f"{case}: {why}"


def test_fixture_was_made_with_the_repetition_ban(fixture_llm: TransformerLM, goldens: dict, stages: dict) -> None:
    # Evidence for the upstream version: in C_instruct the repetition check fires and the pre-Feb-2026
    # redraw (no ban) picks a different token at step 152, so it cannot reproduce `ras_tokens`.
    g = _case(goldens, "C_instruct")
    gen = torch.Generator().manual_seed(stages["C_instruct"]["ras_seed"])
    legacy = RasSampler.from_config(fixture_llm.cfg.sampling, ban_repeated=False)
    tokens = list(fixture_llm.inference(*_inputs(g), sampler=legacy, generator=gen))
    assert tokens != g["ras_tokens"][0].tolist()


def test_incremental_logp_matches_teacher_forcing(fixture_llm: TransformerLM, goldens: dict) -> None:
    g = _case(goldens, "A_zero_shot")  # its continuation is the greedy output itself
    steps: list[torch.Tensor] = []

    def keep_logp(logp: torch.Tensor, decoded: list[int], gen: torch.Generator | None) -> int:
        steps.append(logp.clone())
        return greedy(logp, decoded, gen)

    list(fixture_llm.inference(*_inputs(g), sampler=keep_logp))
    tf = fixture_llm.teacher_forced_logp(*_inputs(g), g["tf_continuation"])[:-1]
    finite = torch.isfinite(torch.stack(steps))  # EOS is masked in the first min_len steps
    _assert_close("cached vs full pass", torch.stack(steps)[finite], tf[finite], 1e-4)
    # `stepped_logp` (what deviation.py measures fast mode with) is the decode's own path: the same rows
    stepped = fixture_llm.stepped_logp(*_inputs(g), g["tf_continuation"])[:-1]
    _assert_close("stepped vs full pass", stepped, tf, 1e-4)


# ---------------------------------------------------------------------------------------------
# Decoding rules and shapes on a random tiny model


def _tiny_cfg() -> LLMConfig:
    def enc(inp: int, layer_type: str, input_layer: str) -> EncoderConfig:
        return EncoderConfig(input_size=inp, output_size=32, attention_heads=4, linear_units=48, num_blocks=2,
                             input_layer=input_layer, layer_type=layer_type,
                             activation="swish" if layer_type == "conformer" else "relu", static_chunk_size=1)

    return LLMConfig(text_token_size=100, speech_token_size=50, text_encoder_input_size=8, llm_input_size=32,
                     llm_output_size=32, spk_embed_dim=12, text_encoder=enc(8, "conformer", "linear"),
                     llm=enc(32, "transformer", "linear_legacy"), sampling=SamplingConfig())


@pytest.fixture(scope="module")
def tiny() -> TransformerLM:
    model = TransformerLM(_tiny_cfg()).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model


def _tiny_inputs(n_text: int = 4, n_prompt: int = 3, n_speech: int = 5, spk: bool = True) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(1)
    return (torch.randint(0, 100, (1, n_text), generator=gen), torch.randint(0, 100, (1, n_prompt), generator=gen),
            torch.randint(0, 50, (1, n_speech), generator=gen), torch.randn(1 if spk else 0, 12, generator=gen))


@pytest.mark.parametrize("n_prompt,n_speech,spk", [(3, 5, True), (0, 0, True), (2, 0, False), (0, 4, False)])
def test_build_input_shapes(tiny: TransformerLM, n_prompt: int, n_speech: int, spk: bool) -> None:
    with torch.inference_mode():
        x = tiny.build_input(*_tiny_inputs(4, n_prompt, n_speech, spk))
    assert x.shape == (1, 1 + int(spk) + n_prompt + 4 + 1 + n_speech, 32)
    assert torch.equal(x[0, 0], tiny.llm_embedding.weight[0])
    assert torch.equal(x[0, -1 - n_speech], tiny.llm_embedding.weight[1])


def _eos_lover(logp: torch.Tensor, decoded: list[int], gen: torch.Generator | None) -> int:
    """Picks EOS whenever it is allowed, else the argmax."""
    eos = logp.numel() - 1
    return eos if torch.isfinite(logp[eos]) else greedy(logp, decoded, gen)


def test_min_len_masks_eos_and_eos_stops(tiny: TransformerLM) -> None:
    inputs = _tiny_inputs(n_text=4)
    assert tiny.length_limits(4) == (8, 80)
    assert len(list(tiny.inference(*inputs, sampler=_eos_lover))) == 8  # EOS allowed from step 8
    assert len(list(tiny.inference(*inputs, sampler=_eos_lover, min_len=0))) == 0


def test_ignore_eos_gives_exactly_max_len_tokens(tiny: TransformerLM) -> None:
    tokens = list(tiny.inference(*_tiny_inputs(), sampler=_eos_lover, ignore_eos=True, max_len=23))
    assert len(tokens) == 23
    assert all(0 <= t < 50 for t in tokens)


def test_early_stop_is_a_prefix_of_the_full_decode(tiny: TransformerLM) -> None:
    full = list(tiny.inference(*_tiny_inputs(), sampler=greedy, ignore_eos=True, max_len=30))
    it = tiny.inference(*_tiny_inputs(), sampler=greedy, ignore_eos=True, max_len=30)
    head = list(itertools.islice(it, 7))
    it.close()
    assert head == full[:7]


def test_ras_decode_is_seeded_and_leaves_the_global_rng_alone(tiny: TransformerLM) -> None:
    sampler = RasSampler.from_config(tiny.cfg.sampling)
    global_state = torch.random.get_rng_state()

    def run(seed: int) -> list[int]:
        gen = torch.Generator().manual_seed(seed)
        return list(tiny.inference(*_tiny_inputs(), sampler=sampler, generator=gen, ignore_eos=True, max_len=40))

    assert run(5) == run(5)
    assert run(5) != run(6)
    list(tiny.inference(*_tiny_inputs(), sampler=sampler, max_len=10))  # generator=None: a private one
    assert torch.equal(torch.random.get_rng_state(), global_state)


def test_inference_rejects_a_non_cpu_generator(tiny: TransformerLM) -> None:
    class FakeGenerator:
        device = torch.device("meta")

    with pytest.raises(ValueError, match="CPU"):
        tiny.inference(*_tiny_inputs(), sampler=greedy, generator=FakeGenerator())  # type: ignore[arg-type]


def test_cached_decode_matches_the_full_causal_pass(tiny: TransformerLM) -> None:
    # Exercises Encoder.forward_step with the position table and KV buffers growing several times.
    xs = torch.randn(1, 70, 32, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        full = tiny.llm(xs)
        cache = DecodeCache(tiny.llm)  # no reserve: every buffer starts at its first call's size
        outs = [tiny.llm.forward_step(xs[:, :5], cache)]
        for i in range(5, 70):
            outs.append(tiny.llm.forward_step(xs[:, i : i + 1], cache))
        plain = tiny.llm.forward_step(xs, DecodeCache(tiny.llm))  # the whole sequence in one call
    assert cache.length == 70 and cache.layers[0].view().shape == (1, 4, 70, 16)
    _assert_close("cached steps vs full", torch.cat(outs, dim=1), full, 1e-5)
    _assert_close("uncached step vs full", plain, full, 1e-6)


def _fresh_tiny() -> TransformerLM:
    model = TransformerLM(_tiny_cfg()).eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model


def test_inference_layouts_keep_shapes_and_leave_the_speaker_projection_a_linear() -> None:
    from torch import nn

    from cosyvoice_ui.cosyvoice.models.linears import onednn_linear_works

    args = (*_tiny_inputs(), torch.randint(0, 50, (1, 6), generator=torch.Generator().manual_seed(3)))
    with torch.inference_mode():
        ref = _fresh_tiny().teacher_forced_logp(*args)
    n_linears = sum(isinstance(m, nn.Linear) for m in _fresh_tiny().modules())
    layouts = [("column_major_linears", n_linears), ("quantize_int8", n_linears - 1)]
    if onednn_linear_works():
        layouts.append(("pack_linears", n_linears - 1))
    for method, count in layouts:
        model = _fresh_tiny()
        assert getattr(model, method)() == count, method  # the speaker projection is skipped where it must be
        assert type(model.spk_embed_affine_layer) is nn.Linear
        with torch.inference_mode():
            out = model.teacher_forced_logp(*args)
        assert out.shape == ref.shape == (7, 51) and torch.isfinite(out).all(), method


@pytest.mark.parametrize("layout", ["row-blocks", "packed", "row-major"])
def test_each_stock_one_row_layout_keeps_the_golden_greedy_decode(v1_fixture: Path, goldens: dict, stages: dict,
                                                                 layout: str, monkeypatch) -> None:
    from cosyvoice_ui.cosyvoice.models.linears import ONE_ROW_LAYOUT_ENV
    from cosyvoice_ui.cosyvoice.precision import speed_up_llm

    monkeypatch.setenv(ONE_ROW_LAYOUT_ENV, layout)  # each CPU's layout, whatever CPU runs the test
    cfg = parse_v1(read_yaml(v1_fixture / "cosyvoice.yaml")).llm
    model = backend_for(V1).load_llm(cfg, read_state_dict(v1_fixture / "llm.pt"))
    speed_up_llm(model, "cpu")
    g, meta = _case(goldens, "A_zero_shot"), stages["A_zero_shot"]
    tokens = list(model.inference(*_inputs(g), sampler=greedy))
    n = meta["greedy_robust_prefix_len"]
    assert tokens[:n] == g["greedy_tokens"][0, :n].tolist() and len(tokens) == meta["greedy_len"]
    logp = model.teacher_forced_logp(*_inputs(g), g["tf_continuation"])
    _assert_close("tf_logp", logp, g["tf_logp"], 1e-4)


def test_the_sampled_tokens_rule_accepts_only_a_late_flip_to_a_drawable_token() -> None:
    golden = list(range(20))
    logp = torch.full((30,), -10.0)
    logp[3], logp[17] = 0.5, 0.0  # our top-2 after the prefix: 3, then 17
    late_flip = golden[:17] + [99, 98]
    assert sampled_tokens_agree(golden, golden, 2, lambda n: logp) == (True, "")
    assert sampled_tokens_agree(late_flip, golden, 2, lambda n: logp)[0]  # step 17 ≥ 15, token 17 in our top-2
    assert not sampled_tokens_agree(late_flip, golden, 1, lambda n: logp)[0]  # outside our top-1 (token 3)
    early = golden[:5] + [99] * 15
    assert sampled_tokens_agree(early, golden, 2, lambda n: logp) == (False, "diverges at step 5 of 20")
