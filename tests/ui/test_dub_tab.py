"""The Dubbing tab without a browser (a fake engine): the video and its subtitles in, the dubbed MP4 out (its video
stream copied, the dub and the original as two tagged audio tracks), with the cue table, a preview and the files;
a cue is regenerated, given its earlier take back, locked and unlocked; a cue gets its own fit (fitted anew without
a new take) and the project's back; a second run with the same video renders only the edited cue; a missing upload
is refused in the user's words."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.studio.dub_media_kit import LINES, make_video, srt_of, streams
from tests.studio.test_dub import LONG, RATE, DubFake, source_track
from tests.ui.test_studio_tabs import build_page_tabs, event, values

gr = pytest.importorskip("gradio")


def build(engine: DubFake, tmp_path: Path):
    from cosyvoice_ui.ui.studio.dub_tab import build_dub

    return build_page_tabs(engine, tmp_path, build_dub)


@pytest.mark.slow
def test_the_tab_dubs_a_video_and_continues_it(tmp_path: Path) -> None:
    video = make_video(tmp_path / "talk.mp4", source_track(), RATE)
    srt = tmp_path / "talk.zh.srt"
    srt.write_text(srt_of(), encoding="utf-8")
    engine = DubFake()
    demo, tab = build(engine, tmp_path)
    request = SimpleNamespace(session_hash="test", headers={})
    start = event(demo, "start_dub")
    steps = list(start.fn(values(start, by={tab.media: str(video), tab.cues: str(srt)}), request, None))
    files, status, rows, preview, current = steps[-1]
    assert status.startswith("Done: 5 cue(s) dubbed, 0 overrun")
    assert [row[3] for row in rows] == ["Alice", "Bob", "Alice", "Bob", "Alice"]
    assert [row[1] for row in rows] == [line[0] for line in LINES]
    assert preview == files[0] and Path(preview).suffix == ".mp4"
    got = streams(Path(preview))
    assert [s["codec_type"] for s in got] == ["video", "audio", "audio"]
    assert got[0]["codec_name"] == "h264" and [s["tags"]["language"] for s in got[1:]] == ["chi", "und"]
    assert sorted(Path(f).suffix for f in files) == [".mp4", ".srt", ".vtt", ".wav"]
    assert len(engine.requests) == 5

    assert current == "talk" and [row[6] for row in rows] == ["1/1"] * 5

    def act(name: str, cue: int, take: int = 1, text: str = ""):
        fn = event(demo, f"dub_cue_{name}")
        by = {tab.current: current, tab.cue_number: cue, tab.take_number: take, tab.cue_text: text}
        return list(fn.fn(values(fn, by=by), request, None))[-1][2]

    assert act("regenerate", 2)[1][6] == "2/2"  # a new take, chosen
    assert act("take", 2, take=1)[1][6] == "1/2"
    assert act("lock", 2)[1][6] == "1/2 · locked"
    with pytest.raises(gr.Error) as refused:
        act("regenerate", 2)
    assert "Cue 2 is locked" in refused.value.message
    assert act("unlock", 2)[1][6] == "1/2"
    assert len(engine.requests) == 6
    rows = act("text", 4, text="换个说法。")  # the translation of cue 4 fixed in the tab
    assert rows[3][4] == "换个说法。" and rows[3][6] == "2/2" and engine.requests[-1].text == "换个说法。"
    with pytest.raises(gr.Error) as empty:
        act("text", 4, text="   ")
    assert "needs words" in empty.value.message
    assert len(engine.requests) == 7

    srt.write_text(srt_of().replace(LINES[1][4], "不太好。"), encoding="utf-8")
    steps = list(start.fn(values(start, by={tab.media: str(video), tab.cues: str(srt)}), request, None))
    assert [r.text for r in engine.requests[7:]] == ["不太好。", LINES[3][4]]  # the edited cues only
    assert steps[-1][2][1][4] == "不太好。"


def test_the_tab_asks_for_both_files(tmp_path: Path) -> None:
    demo, tab = build(DubFake(), tmp_path)
    start = event(demo, "start_dub")
    with pytest.raises(gr.Error) as refused:
        list(start.fn(values(start, by={tab.media: None}), SimpleNamespace(session_hash="t", headers={}), None))
    assert "upload the video and its subtitles" in refused.value.message.lower()


@pytest.mark.slow
def test_a_cue_gets_its_own_fit_in_the_tab_without_a_new_take(tmp_path: Path) -> None:
    """Cue 4's words are too long for it (7.0 s for 3.2 s and a 0.6 s gap): flagged at the project's 0.85-1.2; its
    own range up to 2x fits it into the gap, then "the project's fit" flags it again. Each time only the export
    runs: no request reaches the engine and the cue keeps its one take."""
    import json

    video = make_video(tmp_path / "talk.mp4", source_track(), RATE)
    lines = list(LINES)
    lines[3] = (*lines[3][:4], LONG)
    srt = tmp_path / "talk.zh.srt"
    srt.write_text(srt_of(lines), encoding="utf-8")
    engine = DubFake()
    demo, tab = build(engine, tmp_path)
    request = SimpleNamespace(session_hash="test", headers={})
    start = event(demo, "start_dub")
    _, status, rows, _, current = list(start.fn(values(start, by={tab.media: str(video), tab.cues: str(srt)}),
                                                request, None))[-1]
    assert status.startswith("Done: 5 cue(s) dubbed, 1 overrun")
    assert rows[3][5] == "1.20x · overrun 2.03 s" and rows[3][2] == 16.8
    state = tmp_path / "projects" / "dubs" / "talk" / "project" / "dub.json"

    def act(name: str, low: float = 0.85, high: float = 1.2, overflow: bool = True, cue: int = 4):
        fn = event(demo, f"dub_cue_{name}")
        by = {tab.current: current, tab.cue_number: cue, tab.cue_min_speed: low, tab.cue_max_speed: high,
              tab.cue_overflow: overflow}
        return list(fn.fn(values(fn, by=by), request, None))[-1]

    _, status, rows, preview, _ = act("fit", high=2.0)
    assert status.startswith("Done: 5 cue(s) dubbed, 0 overrun") and Path(preview).is_file()
    assert rows[3][5] == "2.00x · fits · own fit 0.85-2.00x" and rows[3][2] == 16.5 and rows[3][6] == "1/1"
    assert json.loads(state.read_text(encoding="utf-8"))["cues"][3]["fit"] == {
        "min_speed": 0.85, "max_speed": 2.0, "overflow": True}
    rows = act("fit", high=2.0, overflow=False)[2]
    assert rows[3][5] == "2.00x · overrun 0.30 s · own fit 0.85-2.00x, no gap" and rows[3][2] == 16.2
    rows = act("fit_clear")[2]
    assert rows[3][5] == "1.20x · overrun 2.03 s" and rows[3][2] == 16.8 and rows[3][6] == "1/1"
    assert len(engine.requests) == 5  # fitted anew each time, never rendered again
    with pytest.raises(gr.Error) as refused:
        act("fit", cue=9)
    assert "there is no cue 9" in refused.value.message.lower()
