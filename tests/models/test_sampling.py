"""Samplers: the nucleus set, the repetition ban, RNG discipline, and RNG consumption like upstream."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cosyvoice_ui.cosyvoice.config import SamplingConfig
from cosyvoice_ui.cosyvoice.models.sampling import RasSampler, greedy, is_repetition, nucleus_candidates, top_stable


def _logp(probs: list[float]) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float32).log()


def _reference_ras(logp: torch.Tensor, decoded: list[int], gen: torch.Generator, ban: bool) -> tuple[int, bool]:
    """A literal, loop-based statement of upstream's algorithm (our own wording): a running float32
    tensor sum decides the cut, one multinomial over the kept list, a second over the full softmax."""
    values, ids = logp.softmax(dim=0).sort(descending=True, stable=True)
    kept_p, kept_i = [], []
    mass = torch.zeros((), dtype=torch.float32)
    for i in range(values.numel()):
        if not (mass < 0.8 and len(kept_p) < 25):
            break
        mass = mass + values[i]
        kept_p.append(values[i].item())
        kept_i.append(ids[i].item())
    pick = torch.tensor(kept_p, dtype=torch.float32).multinomial(1, replacement=True, generator=gen).item()
    token = kept_i[pick]
    if sum(t == token for t in decoded[-10:]) < 10 * 0.1:
        return token, False
    full = logp.clone()
    if ban:
        full[token] = -math.inf
    return int(full.softmax(dim=0).multinomial(1, replacement=True, generator=gen).item()), True


def test_nucleus_includes_the_token_that_crosses_top_p() -> None:
    # Shuffled on purpose: ids must follow the probabilities, not the positions.
    probs = torch.tensor([0.1, 0.5, 0.05, 0.15, 0.2])
    kept_p, kept_i = nucleus_candidates(probs, top_p=0.8, top_k=25)
    # mass before: 0 (0.5), 0.5 (0.2), 0.7 (0.15, crosses 0.8 → kept), 0.85 (0.1 → stop)
    assert kept_i.tolist() == [1, 4, 3]
    assert torch.allclose(kept_p, torch.tensor([0.5, 0.2, 0.15]))


def test_nucleus_stops_when_the_mass_reaches_top_p_exactly() -> None:
    # In float32, 0.5 + 0.3 == float32(0.8): the running mass is no longer < top_p.
    kept_p, kept_i = nucleus_candidates(torch.tensor([0.3, 0.2, 0.5]), top_p=0.8, top_k=25)
    assert kept_i.tolist() == [2, 0]


def test_nucleus_is_capped_by_top_k_and_keeps_ties_in_id_order() -> None:
    probs = torch.full((100,), 0.01)
    kept_p, kept_i = nucleus_candidates(probs, top_p=0.8, top_k=25)
    assert kept_i.tolist() == list(range(25))  # stable sort: equal probabilities keep id order
    kept_p, kept_i = nucleus_candidates(torch.tensor([0.9, 0.1]), top_p=0.8, top_k=25)
    assert kept_i.tolist() == [0]  # a single token above top_p is the whole nucleus


def test_ras_only_samples_from_the_nucleus() -> None:
    logp = _logp([0.05, 0.4, 0.02, 0.3, 0.03, 0.2])  # nucleus {1, 3, 5}
    sampler = RasSampler()
    gen = torch.Generator().manual_seed(0)
    seen = {sampler(logp, [], gen) for _ in range(300)}
    assert seen == {1, 3, 5}


def test_is_repetition_counts_only_the_window() -> None:
    assert is_repetition([7, 1, 2], 7, win_size=10, tau_r=0.1)
    assert not is_repetition([7] + [1] * 10, 7, win_size=10, tau_r=0.1)  # 7 left the window
    assert not is_repetition([7, 7, 1], 7, win_size=10, tau_r=0.3)  # 2 < 3
    assert is_repetition([7, 7, 7, 1], 7, win_size=10, tau_r=0.3)


def test_repetition_bans_the_token_and_redraws_from_the_full_distribution() -> None:
    logp = _logp([0.9, 0.04, 0.03, 0.03])  # the nucleus is token 0 alone
    banning, legacy = RasSampler(ban_repeated=True), RasSampler(ban_repeated=False)
    banned = [banning(logp, [0], torch.Generator().manual_seed(s)) for s in range(200)]
    assert 0 not in banned and set(banned) == {1, 2, 3}
    redrawn = [legacy(logp, [0], torch.Generator().manual_seed(s)) for s in range(200)]
    assert 0 in redrawn  # without the ban the redraw usually lands on the repeated token again
    assert banning(logp, [1, 2], torch.Generator().manual_seed(0)) == 0  # no repetition: no redraw


def test_ras_does_not_modify_its_input() -> None:
    logp = _logp([0.9, 0.04, 0.03, 0.03])
    before = logp.clone()
    RasSampler()(logp, [0], torch.Generator().manual_seed(0))
    assert torch.equal(logp, before)


@pytest.mark.parametrize("ban", [True, False])
def test_ras_matches_the_upstream_loop_and_rng_consumption(ban: bool) -> None:
    # Peaked random distributions over 4097 ids, with a history that often triggers the redraw.
    torch.manual_seed(1234)  # only to make test inputs; the samplers get their own generators
    sampler = RasSampler(ban_repeated=ban)
    ours, ref = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    decoded: list[int] = []
    redraws = 0
    for _ in range(200):
        logits = torch.randn(4097) * 4.0
        logits[torch.randint(0, 8, (3,))] += 14.0  # favour a few ids so repetitions happen
        logp = logits.log_softmax(dim=0)
        token = sampler(logp, decoded, ours)
        expected, redrew = _reference_ras(logp, decoded, ref, ban)
        assert token == expected
        assert torch.equal(ours.get_state(), ref.get_state())  # same draws consumed
        redraws += redrew
        decoded.append(token)
    assert redraws > 0


def test_ras_draws_once_without_a_repetition() -> None:
    logp = _logp([0.4, 0.3, 0.2, 0.1])
    gen, twin = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    RasSampler()(logp, [], gen)
    kept_p, _ = nucleus_candidates(logp.softmax(0), 0.8, 25)
    kept_p.multinomial(1, replacement=True, generator=twin)
    assert torch.equal(gen.get_state(), twin.get_state())


def test_ras_is_deterministic_per_seed_and_leaves_the_global_rng_alone() -> None:
    logp = torch.randn(4097, generator=torch.Generator().manual_seed(0)).log_softmax(0)
    sampler = RasSampler.from_config(SamplingConfig(top_p=0.95, top_k=50))
    global_state = torch.random.get_rng_state()

    def run(seed: int) -> list[int]:
        gen = torch.Generator().manual_seed(seed)
        out: list[int] = []
        for _ in range(40):
            out.append(sampler(logp, out, gen))
        return out

    first, again, other = run(11), run(11), run(12)
    assert first == again
    assert first != other
    assert torch.equal(torch.random.get_rng_state(), global_state)


def test_ras_requires_a_generator_and_valid_settings() -> None:
    with pytest.raises(ValueError, match="Generator"):
        RasSampler()(_logp([0.5, 0.5]), [], None)
    with pytest.raises(ValueError, match="top_p"):
        RasSampler(top_p=0.0)
    with pytest.raises(ValueError, match="top_k"):
        RasSampler(top_k=0)


def test_greedy_is_argmax_with_first_index_on_ties() -> None:
    assert greedy(_logp([0.1, 0.6, 0.3]), [], None) == 1
    assert greedy(torch.tensor([0.0, 2.0, 2.0, 1.0]), [], None) == 1
    assert greedy(torch.tensor([-math.inf, -1.0, -2.0]), [1, 1, 1], None) == 1  # no repetition logic


@settings(max_examples=300, deadline=None)
@given(levels=st.lists(st.integers(0, 6), min_size=2, max_size=60), k=st.integers(1, 30), scale=st.sampled_from([1.0, 1e-3]))
def test_top_stable_is_the_stable_full_sort_cut_to_k(levels: list[int], k: int, scale: float) -> None:
    # few distinct values, so ties (inside the k and across the cut) are common
    probs = torch.tensor(levels, dtype=torch.float32) * scale
    values, ids = top_stable(probs, k)
    full_values, full_ids = probs.sort(descending=True, stable=True)
    assert torch.equal(values, full_values[:k]) and torch.equal(ids, full_ids[:k])


def test_top_stable_on_a_speech_token_distribution() -> None:
    probs = torch.randn(6761, generator=torch.Generator().manual_seed(0)).softmax(0)
    probs[100] = probs[200] = probs[3000] = 2 * probs.max()  # equal winners: lower ids first
    values, ids = top_stable(probs, 25)
    full_values, full_ids = probs.sort(descending=True, stable=True)
    assert torch.equal(values, full_values[:25]) and torch.equal(ids, full_ids[:25])
    assert ids[:3].tolist() == [100, 200, 3000]
