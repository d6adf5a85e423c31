"""`serving.takes.guarded_synthesis`: a bad segment is re-rendered alone with a new seed and the good take kept,
chunks keep their order and segment indexes, the report says what happened; retries off, streamed requests,
the verify hook; and one run on a tiny CosyVoice model (speech tokens on each segment's last chunk)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui.engine import Engine
from cosyvoice_ui.serving.takes import RetryPolicy, SegmentReport, guarded_synthesis, recall_verifier, retry_seed
from cosyvoice_ui.take_check import MEASURED, spoken_chars
from cosyvoice_ui.types import (Audio, AudioChunk, CheckedRequest, EngineInfo, Mode, ProgressCallback,
                                ProgressEvent, SynthesisRequest)

RATE = 16000
LINES = ("The first sentence is short.", "The second one goes wrong at first.", "And the third ends it.")


def normal_seconds(text: str) -> float:
    _, median, _, overhead, _ = MEASURED["en"]
    return overhead + median * spoken_chars(text)


class ScriptedEngine(Engine):
    """Segments are the text's " | "-separated parts; each is rendered in two chunks of a constant level per
    call (so tests can tell takes apart) and normal length, unless `bad` names (segment text, call number of
    that text) to render wrong: "long" (3×), "short" (0.2×) or "loop" (normal length, its tokens doubled)."""

    def __init__(self, bad: dict[tuple[str, int], str] | None = None) -> None:
        self._info = EngineInfo(name="scripted", family="fake", sample_rate=RATE, modes=(Mode.SFT,), speakers=("A",))
        self.bad = bad or {}
        self.calls: list[tuple[str, int]] = []  # (request text, seed)
        self.renders: dict[str, int] = {}

    @property
    def info(self) -> EngineInfo:
        return self._info

    def _synthesize(self, request: CheckedRequest, progress: ProgressCallback | None,
                    cancel: threading.Event | None) -> Iterator[AudioChunk]:
        self.calls.append((request.text, request.seed))
        parts = [p.strip() for p in request.text.split(" | ")] if request.text_frontend else [request.text]
        for index, text in enumerate(parts):
            self.renders[text] = self.renders.get(text, 0) + 1
            fault = self.bad.get((text, self.renders[text]), "")
            seconds = normal_seconds(text) * {"long": 3.0, "short": 0.2}.get(fault, 1.0)
            n = int(seconds * RATE)
            level = np.float32(0.01 * len(self.calls))
            rng = np.random.default_rng(request.seed)
            tokens = tuple(rng.integers(0, 4096, max(2, int(seconds * 25))).tolist())
            if fault == "loop":
                tokens = tokens + tokens
            halves = (n // 2, n - n // 2)
            for part, size in enumerate(halves):
                last = part == 1
                yield AudioChunk(np.full(size, level, np.float32), RATE, index, len(parts),
                                 last and index == len(parts) - 1, text, tokens if last else ())
            if progress is not None:
                progress(ProgressEvent("segment", (index + 1) / len(parts), f"segment {index + 1}/{len(parts)}: done"))


def request(stream: bool = False, seed: int | None = 7) -> SynthesisRequest:
    return SynthesisRequest(Mode.SFT, text=" | ".join(LINES), speaker="A", seed=seed, stream=stream)


def run(engine: Engine, req: SynthesisRequest, policy: RetryPolicy | None = None):
    events: list[ProgressEvent] = []
    report: list[SegmentReport] = []
    # Two retries unless a test says otherwise: these tests follow a take through both (the default is one)
    chunks = list(guarded_synthesis(engine, req, policy or RetryPolicy(retries=2), events.append, None, report))
    return chunks, report, [e.message for e in events]


def assert_order(chunks: list[AudioChunk], segments: int) -> None:
    assert [c.segment for c in chunks] == sorted(c.segment for c in chunks)
    assert {c.segment for c in chunks} == set(range(segments)) and all(c.segments == segments for c in chunks)
    assert [c.final for c in chunks] == [False] * (len(chunks) - 1) + [True]


def test_good_takes_pass_through_unchanged() -> None:
    engine = ScriptedEngine()
    chunks, report, _ = run(engine, request())
    assert len(engine.calls) == 1
    assert_order(chunks, 3)
    assert [r.segment for r in report] == [0, 1, 2] and all(r.check.ok and r.attempts == 1 for r in report)
    assert [r.text for r in report] == list(LINES) and all(r.seed == 7 for r in report)


@pytest.mark.parametrize("fault", ["long", "short", "loop"])
def test_bad_segment_is_retried_alone_and_the_good_take_kept(fault: str) -> None:
    engine = ScriptedEngine(bad={(LINES[1], 1): fault})
    chunks, report, messages = run(engine, request())
    assert len(engine.calls) == 2
    retry_text, retry_seed_used = engine.calls[1]
    assert retry_text == LINES[1] and retry_seed_used == retry_seed(7, 1, 1) != 7  # alone, with a new seed
    assert_order(chunks, 3)
    middle = [c for c in chunks if c.segment == 1]
    assert all(c.samples[0] == np.float32(0.02) for c in middle)  # the retry's audio (call 2), not the first
    assert sum(len(c.samples) for c in middle) == pytest.approx(normal_seconds(LINES[1]) * RATE, abs=2)
    assert all(c.samples[0] == np.float32(0.01) for c in chunks if c.segment != 1)
    assert [r.attempts for r in report] == [1, 2, 1] and report[1].seed == retry_seed(7, 1, 1)
    assert all(r.check.ok for r in report) and [r.segment for r in report] == [0, 1, 2]
    reason = {"long": "too long for its text", "short": "too short for its text", "loop": "repeated speech"}[fault]
    assert f"segment 2/3: retry 1/2 ({reason})" in messages


def test_a_segment_bad_every_time_keeps_the_least_bad_take() -> None:
    engine = ScriptedEngine(bad={(LINES[0], 1): "long", (LINES[0], 2): "long", (LINES[0], 3): "short"})
    chunks, report, messages = run(engine, request())
    assert len(engine.calls) == 3  # the first render + 2 retries
    assert report[0].attempts == 3 and not report[0].check.ok
    # 3× too long vs 5× too short: the long take (log-distance to the band) is the better one
    assert report[0].check.reasons == ("too_long",)
    assert any("kept the best of 3 takes" in m for m in messages)
    assert_order(chunks, 3)


def test_retries_off_checks_but_never_retries() -> None:
    engine = ScriptedEngine(bad={(LINES[1], 1): "long"})
    chunks, report, messages = run(engine, request(), RetryPolicy(enabled=False))
    assert len(engine.calls) == 1 and "segment 2/3: too long for its text (not retried)" in messages
    assert_order(chunks, 3)
    assert [r.check.ok for r in report] == [True, False, True] and all(r.attempts == 1 for r in report)


def test_streamed_request_is_reported_not_retried() -> None:
    engine = ScriptedEngine(bad={(LINES[2], 1): "long"})
    direct = list(ScriptedEngine(bad={(LINES[2], 1): "long"}).synthesize(request(stream=True)))
    chunks, report, messages = run(engine, request(stream=True))
    assert len(engine.calls) == 1
    assert [(c.segment, c.final, len(c.samples)) for c in chunks] == [(c.segment, c.final, len(c.samples))
                                                                       for c in direct]
    assert report[2].streamed and report[2].check.reasons == ("too_long",)
    assert any("segment 3/3: too long for its text (streamed: not retried)" in m for m in messages)


def test_verify_hook_flags_a_take_the_asr_does_not_recognise() -> None:
    heard: list[tuple[float, str]] = []

    def verify(audio: Audio, text: str) -> float:
        heard.append((audio.duration, text))
        return 0.1 if text == LINES[0] and len(heard) == 1 else 0.9

    engine = ScriptedEngine()
    chunks, report, messages = run(engine, request(), RetryPolicy(retries=2, verify=verify, min_recall=0.5))
    assert engine.calls[1] == (LINES[0], retry_seed(7, 0, 1))
    assert report[0].attempts == 2 and report[0].check.ok and report[0].check.recall == 0.9
    assert heard[0][0] == pytest.approx(normal_seconds(LINES[0]), abs=1e-3)
    assert "segment 1/3: retry 1/2 (words not heard back)" in messages
    assert_order(chunks, 3)


def test_recall_verifier_scores_a_transcriber_and_languages_limit_it() -> None:
    asked: list[str] = []

    def transcribe(audio: Audio, language: str) -> str:
        asked.append(language)
        return "the first sentence" if audio.duration > 0 else ""

    verify = recall_verifier(transcribe)
    assert verify(Audio(np.zeros(RATE, np.float32), RATE), "The first sentence is short.") == pytest.approx(0.6)
    assert asked == ["en"]
    engine = ScriptedEngine()
    calls: list[str] = []
    policy = RetryPolicy(verify=lambda audio, text: calls.append(text) or 1.0, verify_languages=("zh",))
    _, report, _ = run(engine, request(), policy)
    assert calls == [] and all(r.check.recall is None for r in report)  # English text, a zh-only verifier


def test_a_failing_verifier_keeps_the_take() -> None:
    def verify(audio: Audio, text: str) -> float:
        raise RuntimeError("no model")

    engine = ScriptedEngine()
    _, report, _ = run(engine, request(), RetryPolicy(verify=verify))
    assert len(engine.calls) == 1 and all(r.check.ok and r.check.recall is None for r in report)


def test_no_seed_draws_one_and_reports_it() -> None:
    engine = ScriptedEngine(bad={(LINES[0], 1): "long"})
    _, report, _ = run(engine, request(seed=None))
    first_seed = engine.calls[0][1]
    assert report[1].seed == first_seed and engine.calls[1][1] == retry_seed(first_seed, 0, 1)


# --- a tiny CosyVoice model ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def v2_engine(tiny_v2: Path):
    from cosyvoice_ui import load_engine

    return load_engine(tiny_v2, device="cpu")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_tiny_cosyvoice_fills_tokens_and_is_checked(v2_engine, stream: bool) -> None:
    req = SynthesisRequest(Mode.SFT, text="Hello world, this is a test.", speaker=v2_engine.info.speakers[0], seed=3,
                           stream=stream)
    chunks = list(v2_engine.synthesize(req))
    assert chunks[-1].tokens and all(not c.tokens for c in chunks[:-1])  # one segment: tokens on its last chunk
    assert all(0 <= t < 6561 for t in chunks[-1].tokens)
    seconds = sum(len(c.samples) for c in chunks) / chunks[0].sample_rate
    assert seconds == pytest.approx(len(chunks[-1].tokens) / 25, rel=0.1, abs=0.1)  # 25 tokens a second
    report: list[SegmentReport] = []
    guarded = list(guarded_synthesis(v2_engine, req, RetryPolicy(retries=1), report=report))
    assert guarded[-1].final and guarded[-1].tokens and len(report) == 1
    assert report[0].check.seconds > 0 and report[0].check.chars == spoken_chars(req.text)
    assert report[0].attempts in (1, 2) and report[0].streamed is stream


def test_the_default_retry_count_is_one_unless_the_environment_says(monkeypatch) -> None:
    from cosyvoice_ui.serving.takes import policy_from_settings
    from cosyvoice_ui.settings import Settings, default_take_retries
    from cosyvoice_ui.web.flags import build_parser

    monkeypatch.delenv("COSYVOICE_TAKE_RETRIES", raising=False)
    assert default_take_retries() == 1 and Settings().take_retries == 1
    assert build_parser().parse_args([]).take_retries == 1
    assert policy_from_settings(Settings()) == RetryPolicy(enabled=True, retries=1) == RetryPolicy()
    for value, expected in (("0", 0), ("5", 5), ("-1", 1), ("many", 1), ("", 1)):
        monkeypatch.setenv("COSYVOICE_TAKE_RETRIES", value)
        assert default_take_retries() == expected
    assert policy_from_settings(Settings(check_takes=False)).enabled is False
