"""Continuous batching of speech-token decodes (models/decode_batcher.py) on tiny v2/v3 models: a row stepped
beside others computes what it computes alone, sequences join and leave between steps, a consumer that goes away
frees its row, and an engine with a batch width renders concurrent requests that each match their solo render
(stock)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from cosyvoice_ui import Mode, SynthesisRequest, load_engine
from cosyvoice_ui.cosyvoice.models.decode_batcher import DecodeBatcher, batches
from cosyvoice_ui.cosyvoice.kernels import int8_linear_available
from cosyvoice_ui.cosyvoice.models.linears import int8_matrix_units, onednn_linear_works
from cosyvoice_ui.cosyvoice.models.sampling import greedy
from cosyvoice_ui.testing.signals import voice_clip


@pytest.fixture(scope="module")
def v3_engine(tiny_v3: Path):
    return load_engine(tiny_v3, device="cpu")


@pytest.fixture(scope="module", params=["stock", "fast on the own int8 kernel"])
def rows_engine(request, v3_engine, tiny_v3: Path):
    """The engines whose batched rows compute what they compute alone: stock, and fast where its int8 rows run on the
    project's kernel (one scale a row; fbgemm's one scale a call can move a row with its neighbours)."""
    if request.param == "stock":
        return v3_engine
    if not int8_linear_available() or int8_matrix_units():
        pytest.skip("fast runs fbgemm's or oneDNN's int8 rows on this machine, not the project's kernel")
    engine = load_engine(tiny_v3, device="cpu", precision="fast")
    assert engine.info.precision.llm_rows.startswith("own int8 kernel")
    return engine


def _inputs(engine, seed: int, n_text: int = 6):
    g = torch.Generator().manual_seed(seed)
    vocab = 50
    text = torch.randint(1, vocab, (1, n_text), generator=g)
    prompt_text = torch.randint(1, vocab, (1, 3), generator=g)
    marker = getattr(engine.llm, "endofprompt_id", None)  # v3 wants <|endofprompt|> in the prompt text
    if marker is not None:
        prompt_text[0, -1] = marker
    prompt_speech = torch.randint(0, engine.llm.speech_token_size, (1, 5 + seed), generator=g)
    return text, prompt_text, prompt_speech, None


def test_rows_stepped_together_equal_each_row_alone(rows_engine) -> None:
    lm = rows_engine.llm
    d = lm.speech_embedding.weight.size(1)
    caches, solo, prefixes = [], [], []
    with torch.inference_mode():
        for length in (3, 7, 11):  # three decodes at different positions
            prefix = torch.randn(1, length, d, generator=torch.Generator().manual_seed(length))
            a, b = lm.llm.new_cache(), lm.llm.new_cache()
            lm.llm.forward_step(prefix, a)
            lm.llm.forward_step(prefix, b)
            caches.append(a)
            solo.append(b)
            prefixes.append(prefix)
        step = torch.randn(3, 1, d, generator=torch.Generator().manual_seed(0))
        together = lm.llm.forward_rows(step, caches)
        alone = torch.cat([lm.llm.forward_step(step[i : i + 1], solo[i]) for i in range(3)])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    assert [c.length for c in caches] == [4, 8, 12] == [c.length for c in solo]


def test_batched_decodes_give_each_request_its_own_tokens(rows_engine) -> None:
    lm = rows_engine.llm
    # The loop holds its steps until every request is in (else a fast machine may finish one before the next starts).
    go = threading.Event()
    batcher = DecodeBatcher(lm, width=3, hold=lambda: not go.is_set())
    try:
        requests = [_inputs(rows_engine, seed) for seed in range(4)]  # 4 requests, 3 rows: one waits, then joins
        alone = [list(lm.inference(*r, sampler=greedy, max_len=12 + i, min_len=2))
                 for i, r in enumerate(requests)]
        iterators = [batcher.inference(*r, sampler=greedy, max_len=12 + i, min_len=2, urgent=lambda: False)
                     for i, r in enumerate(requests)]
        results: list[list[int]] = [[] for _ in requests]
        threads = [threading.Thread(target=lambda i=i: results[i].extend(iterators[i])) for i in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(0.2)  # each thread submits its request as it starts reading
        go.set()
        for thread in threads:
            thread.join(60)
        assert results == alone
        assert batcher.steps > 0 and batcher.rows / batcher.steps > 1.5  # steps really ran with several rows
    finally:
        batcher.close()


def test_a_consumer_that_stops_frees_its_row_and_the_others_go_on(v3_engine) -> None:
    lm = v3_engine.llm
    batcher = DecodeBatcher(lm, width=2)
    gate, steps = threading.Event(), []

    def held(logp, decoded, generator):  # holds the loop at the 6th token until the test lets go
        steps.append(len(decoded))
        if len(decoded) == 5:
            gate.wait(10)
        return greedy(logp, decoded, generator)

    try:
        first = batcher.inference(*_inputs(v3_engine, 1), sampler=held, max_len=40, min_len=40)
        taken = [next(first) for _ in range(3)]
        first.close()  # the request was stopped
        gate.set()
        second = list(batcher.inference(*_inputs(v3_engine, 2), sampler=greedy, max_len=20, min_len=20))
        assert len(taken) == 3 and len(second) == 20
        assert max(steps) <= 5  # never stepped past the hold: a kept row would run on to its 40th token
    finally:
        batcher.close()


def test_closing_ends_waiting_requests_with_an_error(v3_engine) -> None:
    batcher = DecodeBatcher(v3_engine.llm, width=1)
    tokens = batcher.inference(*_inputs(v3_engine, 3), sampler=greedy, max_len=30, min_len=30)
    next(tokens)
    batcher.close()
    with pytest.raises(RuntimeError, match="unloaded"):
        list(tokens)
    with pytest.raises(RuntimeError, match="unloaded"):
        next(batcher.inference(*_inputs(v3_engine, 4), sampler=greedy, max_len=5))


def test_v1_decodes_alone(tiny_base: Path) -> None:
    engine = load_engine(tiny_base, device="cpu", batch_width=4)
    assert not batches(engine.llm) and engine.token_decoder is engine.llm


@pytest.mark.parametrize("family", ["v2", "v3"])
def test_an_engine_with_a_batch_width_renders_concurrent_requests_as_alone(family, tiny_v2, tiny_v3) -> None:
    folder = {"v2": tiny_v2, "v3": tiny_v3}[family]
    solo = load_engine(folder, device="cpu")
    shared = load_engine(folder, device="cpu", batch_width=3)
    assert isinstance(shared.token_decoder, DecodeBatcher)
    # Greedy picks: a batched row's logits differ from a lone one's in the last float bits (summation order),
    # which can move a random pick that lands on a boundary of the tiny model's near-flat distribution.
    solo.sampler = shared.sampler = greedy
    requests = [SynthesisRequest(Mode.ZERO_SHOT, text=text, prompt_audio=voice_clip(3.0, seed=i),
                                 prompt_text="A prompt transcript.", seed=10 + i)
                for i, text in enumerate(["One of three.", "The second.", "A third."])]
    alone = [np.concatenate([c.samples for c in solo.synthesize(r)]) for r in requests]
    together: list[np.ndarray | None] = [None] * 3

    def run(i: int) -> None:
        together[i] = np.concatenate([c.samples for c in shared.synthesize(requests[i])])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for a, b in zip(alone, together):
        assert b is not None and a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=1e-4)
    shared.close()


def test_set_batch_width_switches_batched_decoding_and_render_turns(tiny_v3: Path) -> None:
    engine = load_engine(tiny_v3, device="cpu")
    assert engine.token_decoder is engine.llm and engine.render_turns is None
    engine.set_batch_width(3)  # what the benchmarks set per level, as the server's --concurrency does at load
    batcher = engine.token_decoder
    assert isinstance(batcher, DecodeBatcher) and batcher.width == 3 and engine.render_turns is not None
    assert batcher.tick is not None  # its thread follows the free cores like the engine's own
    tokens = batcher.inference(*_inputs(engine, 4), sampler=greedy, max_len=3)
    assert len(list(tokens)) == 3
    engine.set_batch_width(1)
    assert engine.token_decoder is engine.llm and engine.render_turns is None
    with pytest.raises(RuntimeError, match="unloaded"):  # the old batcher was closed
        next(batcher.inference(*_inputs(engine, 4), sampler=greedy, max_len=3))
    engine.close()


def test_a_stock_llm_takes_the_packed_layout_when_it_batches(tiny_v3: Path, tiny_base: Path, monkeypatch) -> None:
    monkeypatch.setenv("COSYVOICE_STOCK_ONE_ROW_LAYOUT", "row-major")  # as on the CPUs where that is faster
    engine = load_engine(tiny_v3, device="cpu", precision="stock")
    assert engine.info.precision.llm.startswith("fp32 (row-major for one-row steps")
    assert not engine.llm.has_packed_linears()
    engine.set_batch_width(3)
    if onednn_linear_works():
        assert engine.llm.has_packed_linears()
        assert engine.info.precision.llm.startswith("fp32 (oneDNN packed")
        assert engine.precision.llm == engine.info.precision.llm
    tokens = engine.token_decoder.inference(*_inputs(engine, 4), sampler=greedy, max_len=3)
    assert len(list(tokens)) == 3
    engine.close()
    v1 = load_engine(tiny_base, device="cpu", precision="stock", batch_width=4)  # v1 never batches: one-row steps
    assert not v1.llm.has_packed_linears() and v1.info.precision.llm.startswith("fp32 (row-major")


def test_a_stream_decoded_in_a_batch_is_the_same_for_the_same_seed(v3_engine, tiny_v3) -> None:
    engine = load_engine(tiny_v3, device="cpu", batch_width=2)
    request = SynthesisRequest(Mode.ZERO_SHOT, text="Hi.", prompt_audio=voice_clip(3.0), prompt_text="A prompt.",
                               seed=5)
    model_input = engine._segment_jobs(request)[0][1]

    def stream() -> np.ndarray:  # 40 tokens, streamed: the decoder runs ahead on its own thread
        return np.concatenate([wave.reshape(-1).numpy() for wave, _ in
                               engine.render_input(model_input, torch.Generator().manual_seed(5), stream=True,
                                                   forced_tokens=40)])

    first, second = stream(), stream()
    assert first.size > 0
    np.testing.assert_array_equal(first, second)
    engine.close()


def test_render_turns_go_one_at_a_time_first_chunks_first() -> None:
    import time

    from cosyvoice_ui.cosyvoice.render_turns import RenderTurns

    turns, order, inside = RenderTurns(), [], []
    held = threading.Event()

    def render(name: str, rendered: int) -> None:
        with turns.turn(rendered):
            inside.append(name)
            assert len(inside) == 1, "two renders at once"
            order.append(name)
            if name == "busy":
                held.wait(10)
            inside.remove(name)

    first = threading.Thread(target=render, args=("busy", 0))
    first.start()
    while not order:
        time.sleep(0.01)
    waiting = [threading.Thread(target=render, args=(name, rendered))
               for name, rendered in (("third chunk", 2), ("second chunk", 1), ("first chunk", 0))]
    for thread in waiting:
        thread.start()
        time.sleep(0.05)  # queued in this order
    held.set()
    for thread in [first, *waiting]:
        thread.join(10)
    assert order == ["busy", "first chunk", "second chunk", "third chunk"]


def test_first_renders_are_marked_pending_until_they_end() -> None:
    from cosyvoice_ui.cosyvoice.render_turns import RenderTurns

    turns = RenderTurns()
    request = turns.wrap(lambda: "rendered")
    assert not turns.first_chunks_pending() and request.waiting_for_tokens()
    seen = []
    slow = turns.wrap(lambda: seen.append(turns.first_chunks_pending()))
    slow()  # its first render: pending while it runs
    assert seen == [True] and not slow.waiting_for_tokens() and not turns.first_chunks_pending()
    slow()  # its second render is not a first one
    assert seen == [True, False]
    assert request() == "rendered" and not request.waiting_for_tokens()


def test_the_loop_holds_its_steps_for_a_first_render_unless_a_request_waits_for_tokens(v3_engine) -> None:
    """hold() true and no running sequence urgent: no step. An urgent sequence (its request still waits for its first
    chunk's tokens) keeps the steps going; so does hold() false."""
    import time

    hold, urgent = threading.Event(), threading.Event()
    batcher = DecodeBatcher(v3_engine.llm, 2, hold=hold.is_set)
    try:
        tokens = batcher.inference(*_inputs(v3_engine, 4), sampler=greedy, max_len=40, ignore_eos=True,
                                   urgent=urgent.is_set)
        next(tokens)  # prefilled and stepping
        hold.set()
        time.sleep(0.3)  # the loop notices the hold
        steps = batcher.steps
        time.sleep(0.3)
        assert batcher.steps == steps and batcher.held > 0  # held: no step
        urgent.set()  # the request now waits for tokens: steps resume though the hold stands
        deadline = time.monotonic() + 10
        while batcher.steps == steps and time.monotonic() < deadline:
            time.sleep(0.01)
        assert batcher.steps > steps
        urgent.clear()
        hold.clear()
        assert len([next(tokens) for _ in range(10)]) == 10
        tokens.close()
    finally:
        batcher.close()


def test_engine_threads_let_go_of_their_openmp_teams(tiny_v3: Path, monkeypatch) -> None:
    """After a load, a request, a voice encoding and a speaker vector, and before a request's thread waits for tokens or a render
    turn, the calling thread releases its OpenMP workers (openmp.py: teams of idle threads throttle the others')."""
    import cosyvoice_ui.cosyvoice.engine as cosy_engine
    import cosyvoice_ui.cosyvoice.models.decode_batcher as batcher_module
    import cosyvoice_ui.cosyvoice.render_turns as turns_module
    import cosyvoice_ui.engine as base_engine
    from cosyvoice_ui.openmp import release_threads

    import ctypes

    # torch's OpenMP runtime (5.0+) has the call: a thread outside any parallel region may always pause its team.
    assert release_threads() is hasattr(ctypes.CDLL(None), "omp_pause_resource_all")
    calls: list[str] = []
    for module, where in ((cosy_engine, "engine"), (base_engine, "request"), (batcher_module, "tokens"),
                          (turns_module, "turns")):
        monkeypatch.setattr(module, "release_threads", lambda where=where: calls.append(where) or True)
    engine = load_engine(tiny_v3, device="cpu", batch_width=2)
    assert calls == ["engine"]  # the loading thread
    features = engine.encode_voice(voice_clip(3.0))
    assert calls[-1] == "engine" and features is not None
    calls.clear()
    vector = engine.speaker_embedder().embed(voice_clip(2.0))  # a dub's cues, told apart on a worker thread
    assert calls == ["engine"] and vector.ndim == 1 and vector.size > 0
    calls.clear()
    request = SynthesisRequest(Mode.ZERO_SHOT, text="Hello there.", prompt_audio=voice_clip(3.0),
                               prompt_text="A prompt transcript.", seed=3, stream=True)
    chunks = list(engine.synthesize(request))
    assert chunks and chunks[-1].final
    assert calls[-1] == "request" and "tokens" in calls and "turns" in calls
    engine.close()
