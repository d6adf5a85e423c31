"""Subtitles from segment timing: cue spans add up to the joined audio, and SRT/VTT round-trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving import subtitles
from cosyvoice_ui.serving.subtitles import Cue, SegmentClock
from cosyvoice_ui.types import AudioChunk

RATE = 24000


def chunk(seconds: float, segment: int, segments: int, text: str, final: bool = False) -> AudioChunk:
    return AudioChunk(np.zeros(int(round(seconds * RATE)), np.float32), RATE, segment, segments, final, text)


def test_streamed_chunks_of_one_segment_make_one_cue_spanning_them() -> None:
    chunks = [chunk(0.5, 0, 2, "First sentence."), chunk(0.7, 0, 2, "First sentence."),
              chunk(1.25, 1, 2, "Second one.", final=True)]
    cues = subtitles.cues_from_chunks(chunks, speaker="Ann", offset=2.0)
    assert [(c.start, c.end, c.text, c.speaker) for c in cues] == [
        (2.0, 3.2, "First sentence.", "Ann"), (3.2, 4.45, "Second one.", "Ann")]


def test_a_segment_without_text_takes_the_fallback_and_empty_ones_are_left_out() -> None:
    clock = SegmentClock()
    clock.feed(chunk(1.0, 0, 2, ""))
    clock.feed(chunk(0.0, 1, 2, "nothing heard"))
    assert clock.seconds == pytest.approx(1.0)
    assert [c.text for c in clock.cues(fallback_text="converted speech")] == ["converted speech"]
    assert SegmentClock().cues() == []


def test_srt_and_vtt_have_their_formats_and_labels() -> None:
    cues = [Cue(0.0, 1.5, "Hello.", "Ann"), Cue(61.25, 3723.004, "你好。", "")]
    srt = subtitles.render(cues, "SRT")
    assert srt.splitlines()[:3] == ["1", "00:00:00,000 --> 00:00:01,500", "Ann: Hello."]
    assert "2\n00:01:01,250 --> 01:02:03,004\n你好。" in srt
    vtt = subtitles.render(cues, ".vtt")
    assert vtt.startswith("WEBVTT\n")
    assert "00:00:00.000 --> 00:00:01.500\n<v Ann>Hello." in vtt
    assert subtitles.render(cues, "srt", speakers=False).splitlines()[2] == "Hello."


def test_vtt_text_cannot_break_the_cue_syntax() -> None:
    vtt = subtitles.to_vtt([Cue(0, 1, "a --> b", "<Bob>")])
    assert "a → b" in vtt and "<v &lt;Bob&gt;>" in vtt


def test_long_cues_wrap_to_two_lines() -> None:
    text = "This is a rather long sentence that will not fit on a single subtitle line at all."
    body = subtitles.to_srt([Cue(0, 3, text)]).splitlines()[2:]
    assert len(body) == 2 and all(len(line) <= subtitles.MAX_LINE_CHARS for line in body)
    assert " ".join(body) == text


def test_unknown_format_is_refused_with_the_choices() -> None:
    with pytest.raises(InvalidRequest) as caught:
        subtitles.render([], "ass")
    assert caught.value.code == "bad_subtitle_format" and "srt or vtt" in str(caught.value)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 30.0), st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl",
                                                                                                 "Zp")),
                                                           min_size=1, max_size=30).filter(str.strip)),
                min_size=1, max_size=8),
       st.sampled_from(["srt", "vtt"]))
def test_times_round_trip_to_the_millisecond(pieces, fmt) -> None:
    chunks = [chunk(seconds, i, len(pieces), text) for i, (seconds, text) in enumerate(pieces)]
    cues = subtitles.cues_from_chunks(chunks)
    back = subtitles.parse(subtitles.render(cues, fmt))
    assert len(back) == len(cues)
    for original, parsed in zip(cues, back):
        assert abs(parsed.start - original.start) <= 0.0005 + 1e-9
        assert abs(parsed.end - original.end) <= 0.0005 + 1e-9
    total = sum(len(c.samples) for c in chunks) / RATE
    assert back[-1].end == pytest.approx(total, abs=0.001)
