"""Bad-take checks and subtitles in the UI handlers (no browser, a scripted engine): a bad segment is re-rendered
and the progress line and the take line under the audio say so (en + zh); the output options' checkbox and the
server's --no-take-check switch the checks off; every result gets SRT and VTT files whose cues match the audio
(streamed or not)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.engine import Engine
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.serving.subtitles import parse
from cosyvoice_ui.take_check import MEASURED, spoken_chars
from cosyvoice_ui.types import AudioChunk, CheckedRequest, EngineInfo, Mode, ProgressCallback, SynthesisRequest

gr = pytest.importorskip("gradio")

from cosyvoice_ui.ui.handlers import Handlers, OutputOptions, take_summary  # noqa: E402  (needs gradio)

RATE = 16000
PARTS = ("A calm first sentence.", "This middle one starts out badly.", "And a short ending.")


def natural_seconds(text: str) -> float:
    """How long the offline voice's measurements say `text` takes (inside every family's band)."""
    _, median, _, overhead, _ = MEASURED["en"]
    return overhead + median * spoken_chars(text)


class SegmentedEngine(Engine):
    """Renders each " | "-separated part as one segment of two chunks; `bad` lists (part, render number) pairs
    that come out three times too long (a stuck take)."""

    def __init__(self, bad: set[tuple[str, int]] = frozenset()) -> None:
        self._info = EngineInfo(name="segmented", family="fake", sample_rate=RATE, modes=(Mode.SFT, Mode.VC),
                                speakers=("A",))
        self.bad = set(bad)
        self.renders: dict[str, int] = {}
        self.requests: list[str] = []

    @property
    def info(self) -> EngineInfo:
        return self._info

    def _synthesize(self, request: CheckedRequest, progress: ProgressCallback | None,
                    cancel: threading.Event | None) -> Iterator[AudioChunk]:
        self.requests.append(request.text)
        parts = [p.strip() for p in request.text.split("|")]
        for index, text in enumerate(parts):
            self.renders[text] = self.renders.get(text, 0) + 1
            stretch = 3.0 if (text, self.renders[text]) in self.bad else 1.0
            samples = int(natural_seconds(text) * stretch * RATE)
            noise = np.random.default_rng(request.seed).standard_normal(samples).astype(np.float32) * 0.1
            halves = (noise[: samples // 2], noise[samples // 2:])
            for part, piece in enumerate(halves):
                yield AudioChunk(piece, RATE, index, len(parts), part == 1 and index == len(parts) - 1, text)


def handlers_for(engine: Engine, tmp_path: Path, **settings) -> Handlers:
    manager = ModelManager("segmented", loader=lambda model_id, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda model_id: engine.info)
    return Handlers(manager, Settings(**{"take_retries": 2, **settings}), tmp_path / "out")  # 2 retries (default 1)


def generate(handlers: Handlers, options: OutputOptions = OutputOptions(), lang: str = "en", stream: bool = False,
             text: str = " | ".join(PARTS)):
    bars: list[str] = []
    request = SynthesisRequest(Mode.SFT, text=text, speaker="A", seed=11, stream=stream)
    outputs = list(handlers.generate(request, options, [], None, lambda fraction, desc="": bars.append(desc),
                                     lang=lang))
    return outputs, bars


def test_a_bad_segment_is_retried_and_the_progress_and_take_line_say_so(tmp_path: Path) -> None:
    engine = SegmentedEngine(bad={(PARTS[1], 1)})
    outputs, bars = generate(handlers_for(engine, tmp_path))
    assert engine.requests == [" | ".join(PARTS), PARTS[1]]  # the middle segment alone, once more
    assert "Speaking: segment 2/3: retry 1/2 (too long for its text)" in bars
    (rate, wave), path, subtitles, info, takes, history = outputs[-1]
    assert takes == "Segment 2/3 re-rendered (too long for its text): good after 2 takes."
    expected = sum(natural_seconds(p) for p in PARTS)  # the good take replaced the stuck one
    assert len(wave) / rate == pytest.approx(expected, abs=0.01)


def test_the_retry_is_reported_in_chinese(tmp_path: Path) -> None:
    engine = SegmentedEngine(bad={(PARTS[1], 1)})
    outputs, bars = generate(handlers_for(engine, tmp_path), lang="zh")
    assert "朗读 · 第 2/3 段：第 1/2 次重试（与文字相比太长）" in bars
    assert outputs[-1][4] == "第 2/3 段已重新生成（与文字相比太长）：第 2 次生成后正常。"


def test_a_segment_bad_every_time_keeps_the_best_take_and_warns(tmp_path: Path) -> None:
    engine = SegmentedEngine(bad={(PARTS[1], n) for n in (1, 2, 3)})
    outputs, bars = generate(handlers_for(engine, tmp_path))
    assert len(engine.requests) == 3  # the first render, then two retries (the default policy)
    assert outputs[-1][4].startswith("Segment 2/3 still sounds off (too long for its text) after 3 takes")
    assert any("kept the best of 3 takes" in bar for bar in bars)


def test_all_good_takes_are_one_short_line(tmp_path: Path) -> None:
    engine = SegmentedEngine()
    outputs, _ = generate(handlers_for(engine, tmp_path))
    assert len(engine.requests) == 1
    assert outputs[-1][4] == "Takes checked: 3 segment(s), all plausible."


def test_the_browser_checkbox_switches_checks_off(tmp_path: Path) -> None:
    engine = SegmentedEngine(bad={(PARTS[1], 1)})
    outputs, bars = generate(handlers_for(engine, tmp_path), OutputOptions(check_takes=False))
    assert len(engine.requests) == 1 and not any("retry" in bar for bar in bars)
    assert outputs[-1][4] == "Take checks off."


def test_the_servers_no_take_check_wins_over_the_browser(tmp_path: Path) -> None:
    engine = SegmentedEngine(bad={(PARTS[1], 1)})
    handlers = handlers_for(engine, tmp_path, check_takes=False)
    assert handlers.prepare(SynthesisRequest(Mode.SFT, text="x y", speaker="A", seed=1),
                            OutputOptions(check_takes=True)).policy is None  # the switch on cannot turn it on
    outputs, _ = generate(handlers)
    assert len(engine.requests) == 1 and outputs[-1][4] == "Take checks off."


def test_no_retries_left_checks_and_reports_only(tmp_path: Path) -> None:
    engine = SegmentedEngine(bad={(PARTS[1], 1)})
    outputs, _ = generate(handlers_for(engine, tmp_path, take_retries=0))
    assert len(engine.requests) == 1
    assert "Segment 2/3" in outputs[-1][4] and "too long for its text" in outputs[-1][4]


def test_a_streamed_result_is_checked_not_retried(tmp_path: Path) -> None:
    engine = SegmentedEngine(bad={(PARTS[1], 1)})
    outputs, _ = generate(handlers_for(engine, tmp_path), stream=True)
    assert len(engine.requests) == 1
    assert outputs[-1][4] == "Segment 2/3 may sound off (too long for its text); not retried."


def cues_of(path: str):
    return parse(Path(path).read_text(encoding="utf-8"))


@pytest.mark.parametrize("stream", [False, True])
def test_subtitles_match_the_audio_within_50_ms(tmp_path: Path, stream: bool) -> None:
    engine = SegmentedEngine(bad={(PARTS[1], 1)})  # a retried segment too: its replacement is what is timed
    outputs, _ = generate(handlers_for(engine, tmp_path), stream=stream)
    _, path, subtitles, *_ = outputs[-1]
    srt, vtt = sorted(subtitles)
    assert Path(srt).suffix == ".srt" and Path(vtt).suffix == ".vtt"
    assert Path(srt).stem == Path(path).stem  # beside the audio, same name
    assert Path(vtt).read_text(encoding="utf-8").startswith("WEBVTT")
    wave, rate = sf.read(path)
    for cues in (cues_of(srt), cues_of(vtt)):
        assert [c.text for c in cues] == list(PARTS)
        stretch = (1.0, 3.0 if stream else 1.0, 1.0)  # a streamed take is not retried: the long one stays
        edges = np.cumsum([0.0] + [natural_seconds(p) * k for p, k in zip(PARTS, stretch)])
        for cue, start, end in zip(cues, edges[:-1], edges[1:]):
            assert abs(cue.start - start) < 0.05 and abs(cue.end - end) < 0.05
        assert abs(cues[-1].end - len(wave) / rate) < 0.05


def test_a_one_segment_result_has_one_cue_over_the_whole_audio(tmp_path: Path) -> None:
    outputs, _ = generate(handlers_for(SegmentedEngine(), tmp_path), text="Just this one line.")
    _, path, subtitles, *_ = outputs[-1]
    wave, rate = sf.read(path)
    (cue,) = cues_of(sorted(subtitles)[0])
    assert cue.text == "Just this one line." and cue.start == 0.0 and abs(cue.end - len(wave) / rate) < 0.05


def test_the_four_output_view_is_kept_for_audio_only_callers(tmp_path: Path) -> None:
    handlers = handlers_for(SegmentedEngine(), tmp_path)
    request = SynthesisRequest(Mode.SFT, text="One line.", speaker="A", seed=1)
    *_, last = handlers.run(request, OutputOptions(), [], None, None)
    (rate, wave), path, info, history = last
    assert Path(path).is_file() and history[0]["file"] == path and "seed 1" in info


def test_take_summary_without_reports_is_empty_and_off_says_off() -> None:
    assert take_summary([], True, "en") == ""
    assert take_summary([], False, "zh") == "未检查生成质量。"


def test_the_checkbox_says_what_the_check_does_and_what_a_retry_costs() -> None:
    """The info line names the default number of retries (one: benchmarks/bad_takes.py) and the price of one, in
    plain words in both languages."""
    from cosyvoice_ui.settings import DEFAULT_TAKE_RETRIES
    from cosyvoice_ui.ui import strings

    en, zh = strings.LABELS_EN["check_takes_info"], strings.LABELS_ZH["check_takes_info"]
    assert DEFAULT_TAKE_RETRIES == 1  # the words below say "once"
    assert "length fits its text" in en and "repeats" in en and "new seed (once by default)" in en
    assert "about as long again as that segment" in en
    assert "时长" in zh and "重复" in zh and "默认一次" in zh and "再花该片段原来的时间" in zh
    for jargon in ("token", "band", "EOS", "seed per"):
        assert jargon not in en, jargon
