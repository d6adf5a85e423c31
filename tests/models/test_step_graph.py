"""The recorded decoding steps (models/step_graph.py) on tiny v2/v3 models: they give the eager steps' numbers bit for
bit in every precision, decoding really takes them (also where a cache has to grow), a re-layout of the weights
drops them, and they add nothing to the model's modules, state dict or copies."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

import pytest
import torch

from cosyvoice_ui.cosyvoice.engine import load_engine
from cosyvoice_ui.cosyvoice.models import step_graph
from cosyvoice_ui.cosyvoice.models.linears import onednn_linear_works
from cosyvoice_ui.cosyvoice.models.sampling import greedy
from cosyvoice_ui.cosyvoice.precision import STEP_GRAPH_ENV, apply_precision


@contextlib.contextmanager
def _eager(lm, rows: tuple[int, ...] = (1,)):
    """The LLM without its recorded steps for these row counts, for a while."""
    kept = dict(lm.llm.step_graphs)
    for count in rows:
        lm.llm.step_graphs.pop(count, None)
    try:
        yield
    finally:
        lm.llm.step_graphs.update(kept)


@pytest.fixture
def graph_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The row count of every recorded step called while a test runs."""
    calls: list[int] = []
    original = step_graph.StepGraph.__call__
    monkeypatch.setattr(step_graph.StepGraph, "__call__",
                        lambda self, *args: calls.append(self.rows) or original(self, *args))
    return calls


def _steps(lm, graph: bool, reserve: int, n: int = 6) -> tuple[torch.Tensor, list[int]]:
    """Hidden states of a 5-position prefill and `n` one-position steps, with or without the recorded step, and
    the cache lengths after each step."""
    d = lm.speech_embedding.weight.size(1)
    g = torch.Generator().manual_seed(7)
    prefix = torch.randn(1, 5, d, generator=g)
    steps = [torch.randn(1, 1, d, generator=g) for _ in range(n)]
    with contextlib.nullcontext() if graph else _eager(lm), torch.inference_mode():
        cache = lm.llm.new_cache(reserve=reserve)
        outs = [lm.llm.forward_step(prefix, cache)[:, -1:]]
        lengths = []
        for x in steps:
            outs.append(lm.llm.forward_step(x, cache))
            lengths.append(cache.length)
    return torch.cat(outs, dim=1), lengths


@pytest.fixture(scope="module", params=["stock", "fast", "extra-fast"])
def v3_lm(request, tiny_v3: Path):
    engine = load_engine(tiny_v3, device="cpu", precision=request.param)
    return engine


def test_loading_records_the_step_and_reports_it(v3_lm) -> None:
    assert v3_lm.precision.llm_step == "recorded graph"
    assert v3_lm.llm.has_decode_step()


def test_the_recorded_step_gives_the_eager_numbers_bit_for_bit(v3_lm, graph_calls: list[int]) -> None:
    recorded, lengths = _steps(v3_lm.llm, graph=True, reserve=64)
    assert graph_calls == [1] * 6  # every one-position step ran as the graph
    eager, eager_lengths = _steps(v3_lm.llm, graph=False, reserve=64)
    assert graph_calls == [1] * 6
    assert torch.equal(recorded, eager)
    assert lengths == eager_lengths == [6, 7, 8, 9, 10, 11]


def test_a_cache_that_must_grow_grows_under_the_graph_too(v3_lm, graph_calls: list[int]) -> None:
    # reserve 0: the prefill's 5 positions fill the buffers exactly, so the first step and the sixth must grow them
    grown, lengths = _steps(v3_lm.llm, graph=True, reserve=0, n=8)
    assert graph_calls == [1] * 8
    eager, _ = _steps(v3_lm.llm, graph=False, reserve=0, n=8)
    assert torch.equal(grown, eager) and lengths == list(range(6, 14))


def test_decoded_tokens_are_the_same_with_and_without_the_graph(v3_lm) -> None:
    lm = v3_lm.llm
    g = torch.Generator().manual_seed(3)
    text = torch.randint(1, 50, (1, 6), generator=g)
    prompt_text = torch.randint(1, 50, (1, 3), generator=g)
    prompt_text[0, -1] = lm.endofprompt_id
    prompt_speech = torch.randint(0, lm.speech_token_size, (1, 9), generator=g)
    with_graph = list(lm.inference(text, prompt_text, prompt_speech, None, sampler=greedy, max_len=20, min_len=20))
    with _eager(lm):
        eager = list(lm.inference(text, prompt_text, prompt_speech, None, sampler=greedy, max_len=20, min_len=20))
    assert with_graph == eager and len(eager) == 20


def test_autograd_or_several_rows_take_the_eager_step(v3_lm) -> None:
    graph = v3_lm.llm.llm.step_graphs[1]
    d = v3_lm.llm.speech_embedding.weight.size(1)
    with torch.inference_mode():
        assert graph.usable(torch.zeros(1, 1, d))
        assert not graph.usable(torch.zeros(2, 1, d)) and not graph.usable(torch.zeros(1, 3, d))
        assert not graph.usable(torch.zeros(1, 1, d, dtype=torch.float64))
    with torch.enable_grad():
        assert not graph.usable(torch.zeros(1, 1, d))


def test_the_graph_adds_nothing_to_the_model(tiny_v2: Path) -> None:
    engine = load_engine(tiny_v2, device="cpu", precision="fast")
    lm = engine.llm
    assert lm.has_decode_step()
    keys = set(lm.state_dict())
    modules = {name for name, _ in lm.named_modules()}
    assert not any("step_graph" in key for key in keys) and not any("step_graph" in name for name in modules)
    copied = copy.deepcopy(lm)  # a copy's layers are other tensors: no graph of the original's
    assert copied.llm.step_graphs.get(1) is None and not copied.has_decode_step()
    assert lm.has_decode_step()


def test_a_re_layout_drops_the_graph_and_recording_again_takes_the_new_layers(tiny_v2: Path, monkeypatch) -> None:
    monkeypatch.setenv("COSYVOICE_STOCK_ONE_ROW_LAYOUT", "row-major")  # plain linears, which quantise
    engine = load_engine(tiny_v2, device="cpu", precision="stock")
    lm = engine.llm
    before, _ = _steps(lm, graph=True, reserve=32)
    assert lm.quantize_int8() > 0
    assert not lm.has_decode_step()  # a graph of the float layers would still decode in float (and hold them)
    assert lm.record_decode_step() and lm.has_decode_step()
    recorded, _ = _steps(lm, graph=True, reserve=32)
    eager, _ = _steps(lm, graph=False, reserve=32)
    assert torch.equal(recorded, eager) and not torch.equal(recorded, before)


def test_the_switch_turns_it_off(tiny_v3: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STEP_GRAPH_ENV, "0")
    engine = load_engine(tiny_v3, device="cpu", precision="fast")
    assert engine.precision.llm_step == "" and not engine.llm.has_decode_step()
    monkeypatch.delenv(STEP_GRAPH_ENV)
    assert apply_precision(engine.llm, engine.flow, "fast", "cpu").llm_step == "recorded graph"


@pytest.mark.skipif(not onednn_linear_works(), reason="oneDNN's packed linear is not available here")
def test_a_stock_engine_that_re_lays_for_a_batch_width_records_again(tiny_v3: Path) -> None:
    engine = load_engine(tiny_v3, device="cpu", precision="stock")
    engine.set_batch_width(3)
    try:
        assert engine.llm.has_packed_linears() and engine.llm.has_decode_step()
        engine.wait_for_recorded_steps(120)
        assert engine.precision.llm_step == "recorded graph" and "oneDNN packed" in engine.precision.llm
        assert set(engine.llm.llm.step_graphs) == {1, 2, 3}  # rows recorded on their own thread
        recorded, _ = _steps(engine.llm, graph=True, reserve=32)
        eager, _ = _steps(engine.llm, graph=False, reserve=32)
        assert torch.equal(recorded, eager)
    finally:
        engine.set_batch_width(1)


def _rows(lm, graph: bool, n: int = 3) -> tuple[torch.Tensor, list[int]]:
    """Hidden states of `n` decodes at different positions stepped together three times (`forward_rows`), with or
    without the recorded steps of several rows, and the caches' lengths after."""
    d = lm.speech_embedding.weight.size(1)
    with contextlib.nullcontext() if graph else _eager(lm, rows=(2, 3, 4)), torch.inference_mode():
        caches = []
        for length in range(3, 3 + 4 * n, 4):
            cache = lm.llm.new_cache(reserve=40)
            lm.llm.forward_step(torch.randn(1, length, d, generator=torch.Generator().manual_seed(length)), cache)
            caches.append(cache)
        g = torch.Generator().manual_seed(11)
        outs = [lm.llm.forward_rows(torch.randn(n, 1, d, generator=g), caches) for _ in range(3)]
    return torch.cat(outs, dim=1), [cache.length for cache in caches]


def test_steps_of_several_rows_take_their_graph_with_the_eager_numbers(v3_lm, graph_calls: list[int]) -> None:
    lm = v3_lm.llm
    assert lm.record_decode_rows(3) == 2 and set(lm.llm.step_graphs) == {1, 2, 3}
    for n in (2, 3):
        recorded, lengths = _rows(lm, graph=True, n=n)
        eager, eager_lengths = _rows(lm, graph=False, n=n)
        assert torch.equal(recorded, eager)
        assert lengths == eager_lengths == [length + 3 for length in range(3, 3 + 4 * n, 4)]
    assert graph_calls == [2, 2, 2, 3, 3, 3]
    _rows(lm, graph=True, n=4)  # no graph of 4 rows: the eager rows, no graph call
    assert graph_calls == [2, 2, 2, 3, 3, 3]


@pytest.fixture(scope="module", params=["stock", "fast", "extra-fast"])
def v1_lm(request, tiny_base: Path):
    return load_engine(tiny_base, device="cpu", precision=request.param)


def test_v1_records_its_step_with_the_eager_numbers_bit_for_bit(v1_lm, graph_calls: list[int]) -> None:
    assert v1_lm.precision.llm_step == "recorded graph" and v1_lm.llm.has_decode_step()
    recorded, lengths = _steps(v1_lm.llm, graph=True, reserve=8)  # the cache grows past 8 under the graph
    assert graph_calls == [1] * 6
    eager, eager_lengths = _steps(v1_lm.llm, graph=False, reserve=8)
    assert graph_calls == [1] * 6
    assert torch.equal(recorded, eager)
    assert lengths == eager_lengths == [6, 7, 8, 9, 10, 11]


def test_v1_steps_match_a_full_causal_pass(tiny_base: Path) -> None:
    """In stock, a prefill then one-position steps (recorded) give what one causal pass over every position gives
    (int8 quantises each call's activations over that call's own range, so fast differs by design)."""
    engine = load_engine(tiny_base, device="cpu", precision="stock")
    lm = engine.llm
    assert lm.has_decode_step()
    d = lm.speech_embedding.weight.size(1)
    xs = torch.randn(1, 9, d, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        full = lm.llm(xs)
        cache = lm.llm.new_cache(reserve=4)
        outs = [lm.llm.forward_step(xs[:, :5], cache)] + [lm.llm.forward_step(xs[:, i:i + 1], cache)
                                                           for i in range(5, 9)]
    torch.testing.assert_close(torch.cat(outs, dim=1), full, atol=1e-5, rtol=1e-5)


def test_a_v1_relayout_drops_its_step(tiny_base: Path) -> None:
    engine = load_engine(tiny_base, device="cpu", precision="stock")
    assert engine.llm.has_decode_step()
    engine.llm.quantize_int8()
    assert not engine.llm.has_decode_step()
    assert engine.llm.record_decode_step() and engine.llm.has_decode_step()
    copied = copy.deepcopy(engine.llm)
    assert not copied.has_decode_step()  # a copy's layers are other tensors: no graph


def test_v1_recorded_step_serves_decodes_on_several_threads_at_once(tiny_base: Path, graph_calls: list[int]) -> None:
    """v1 never batches, so concurrent requests decode on their own threads through the one recorded step."""
    import threading

    lm = load_engine(tiny_base, device="cpu", precision="stock").llm
    alone, _ = _steps(lm, graph=True, reserve=8, n=12)
    results: list[torch.Tensor | None] = [None] * 4

    def decode(i: int) -> None:
        results[i] = _steps(lm, graph=True, reserve=8, n=12)[0]

    threads = [threading.Thread(target=decode, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(graph_calls) == 5 * 12  # every step of every thread took the graph
    assert all(result is not None and torch.equal(result, alone) for result in results)
