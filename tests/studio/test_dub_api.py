"""Dubbing over REST: POST /v1/dubs with a video and its subtitles starts a background job in the model queue; its
progress and cue table are read back, its files fetched (the video with the copied stream and two tagged tracks,
the adjusted SRT); a stopped job resumes with only the missing cues, and so does one a restart of the server cut
short (it reads as interrupted, with how many cues are rendered); a cue's own fit is merged and fitted anew without
a new take; refusals and unknown ids answer in the API's one error shape; consent is asked for a voice cut from the
upload where the server requires it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_ui.api.routes import add_routes
from cosyvoice_ui.engine import raise_if_cancelled
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.serving.subtitles import parse
from cosyvoice_ui.settings import Settings
from tests.web_client import LOOPBACK

from .dub_media_kit import LINES, make_video, srt_of, streams
from .test_dub import LONG, RATE, DubFake, source_track


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    return make_video(tmp_path_factory.mktemp("media") / "talk.mp4", source_track(), RATE)


def client_for(tmp_path: Path, engine: DubFake, **settings) -> TestClient:
    config = Settings(**{"voices_dir": tmp_path / "voices", "glossary_dir": tmp_path / "glossaries",
                         "projects_dir": tmp_path / "projects", "idle_unload_s": 0, **settings})
    manager = ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda mid: engine.info)
    app = FastAPI(docs_url=None)
    add_routes(app, manager, config)
    return TestClient(app, base_url=LOOPBACK)


def start(client: TestClient, video: Path, srt: str = srt_of(), **fields):
    with open(video, "rb") as handle:
        return client.post("/v1/dubs", files={"media": ("talk.mp4", handle, "video/mp4"),
                                              "cues": ("talk.zh.srt", srt.encode(), "text/plain")},
                           data={"source_lang": "en", **fields})


def wait(client: TestClient, job_id: str, until=("done", "failed", "stopped"), seconds: float = 60.0) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        job = client.get(f"/v1/dubs/{job_id}").json()
        if job["status"] in until:
            return job
        time.sleep(0.05)
    raise AssertionError(f"the job did not finish: {job}")


@pytest.mark.slow
def test_a_dub_job_runs_in_the_background_and_serves_its_files(video: Path, tmp_path: Path) -> None:
    client = client_for(tmp_path, DubFake())
    response = start(client, video, max_speed="1.25")
    assert response.status_code == 202, response.text
    job = wait(client, response.json()["id"])
    assert job["status"] == "done" and job["progress"] == 1.0 and job["code"] == "dub_finished"
    assert [c["speaker"] for c in job["cues"]] == ["Alice", "Bob", "Alice", "Bob", "Alice"]
    assert all(c["fit"]["overrun"] == 0 and c["takes"] == 1 for c in job["cues"])
    files = {url.rsplit("/", 1)[1]: client.get(url) for url in job["files"]}
    assert all(r.status_code == 200 for r in files.values())
    (tmp_path / "dubbed.mp4").write_bytes(files["video"].content)
    got = streams(tmp_path / "dubbed.mp4")
    assert [s["codec_type"] for s in got] == ["video", "audio", "audio"]
    assert [s["tags"]["language"] for s in got[1:]] == ["chi", "eng"]
    spoken = parse(files["srt"].text)
    assert [round(c.start, 3) for c in spoken] == [line[0] for line in LINES]


def test_a_stopped_job_resumes_with_the_missing_cues(video: Path, tmp_path: Path) -> None:
    engine = DubFake()
    engine.release.clear()  # every chunk waits: the job is stopped while it renders cue 1
    client = client_for(tmp_path, engine)
    job_id = start(client, video).json()["id"]
    wait(client, job_id, until=("running",))
    deadline = time.monotonic() + 30
    while not engine.requests and time.monotonic() < deadline:  # cue 1 is on the engine
        time.sleep(0.02)
    assert client.get(f"/v1/dubs/{job_id}/files/video").json()["error"]["code"] == "dub_not_ready"
    assert client.delete(f"/v1/dubs/{job_id}").status_code == 200
    engine.release.set()
    job = wait(client, job_id)
    assert job["status"] == "stopped" and job["files"] == []
    rendered, asked = sum(c["takes"] for c in job["cues"]), len(engine.requests)
    assert rendered < 5
    assert client.post(f"/v1/dubs/{job_id}/resume").status_code == 202
    job = wait(client, job_id)
    assert job["status"] == "done"
    assert len(engine.requests) - asked == 5 - rendered  # only the cues without a take
    assert all(c["takes"] == 1 for c in job["cues"])


class HeldFake(DubFake):
    """Holds its `hold_at`-th take (`holding` is set then) until `gate` is set or the job is stopped: the job stays
    running there, with the takes before it saved."""

    def __init__(self, hold_at: int) -> None:
        super().__init__()
        self.hold_at = hold_at
        self.holding = threading.Event()
        self.gate = threading.Event()

    def _synthesize(self, request, progress, cancel):
        if len(self.requests) + 1 == self.hold_at:
            self.holding.set()
            while not self.gate.wait(0.05):
                raise_if_cancelled(cancel)
        yield from super()._synthesize(request, progress, cancel)


def test_a_job_a_restart_cut_short_reads_as_interrupted_and_resumes_the_rest(video: Path, tmp_path: Path) -> None:
    """The server stops while cue 3 renders (cues 1-2 saved): a new server over the same folders says the job was
    interrupted, with 2 of 5 cues rendered; resume renders cues 3-5 only, and a later server reads it as done."""
    first = HeldFake(hold_at=3)
    before = client_for(tmp_path, first)
    job_id = start(before, video).json()["id"]
    try:
        assert first.holding.wait(60) and len(first.requests) == 2  # cue 3 is on the engine
        engine = DubFake()
        after = client_for(tmp_path, engine)  # the restarted server: a new process over the same folders
        job = after.get(f"/v1/dubs/{job_id}").json()
        assert (job["status"], job["code"], job["params"]) == ("interrupted", "dub_interrupted",
                                                               {"rendered": 2, "cues": 5})
        assert "2 of 5 cues are rendered" in job["message"] and f"/v1/dubs/{job_id}/resume" in job["message"]
        assert [c["takes"] for c in job["cues"]] == [1, 1, 0, 0, 0] and job["files"] == []
        assert after.get(f"/v1/dubs/{job_id}/files/video").json()["error"]["code"] == "dub_not_ready"
        assert after.post(f"/v1/dubs/{job_id}/resume").status_code == 202
        job = wait(after, job_id)
        assert job["status"] == "done" and [c["takes"] for c in job["cues"]] == [1] * 5
        assert [r.text for r in engine.requests] == [line[4] for line in LINES[2:]]  # only the missing cues
        later = client_for(tmp_path, DubFake()).get(f"/v1/dubs/{job_id}").json()
        assert (later["status"], later["code"], later["params"]) == ("done", "dub_finished",
                                                                     {"cues": 5, "overrun": 0})
        assert len(later["files"]) == 4
    finally:  # the first server's job, still held on cue 3, is stopped and let go
        before.delete(f"/v1/dubs/{job_id}")
        first.gate.set()
        wait(before, job_id)


def test_a_stopped_job_still_reads_as_stopped_after_a_restart(video: Path, tmp_path: Path) -> None:
    engine = HeldFake(hold_at=2)
    client = client_for(tmp_path, engine)
    job_id = start(client, video).json()["id"]
    assert engine.holding.wait(60)
    client.delete(f"/v1/dubs/{job_id}")
    assert wait(client, job_id)["status"] == "stopped"
    job = client_for(tmp_path, DubFake()).get(f"/v1/dubs/{job_id}").json()
    assert (job["status"], job["code"], job["params"]) == ("stopped", "dub_stopped", {"rendered": 1, "cues": 5})


@pytest.mark.slow
def test_a_cue_gets_its_own_fit_over_rest_without_a_new_take(video: Path, tmp_path: Path) -> None:
    """PATCH fit adds to the cue's own fit (null: the project's again); resume fits it anew and renders nothing."""
    lines = list(LINES)
    lines[3] = (*lines[3][:4], LONG)  # 7.0 s for a 3.2 s cue with 0.6 s of gap: flagged at 0.85-1.2
    engine = DubFake()
    client = client_for(tmp_path, engine)
    job_id = start(client, video, srt_of(lines)).json()["id"]
    assert wait(client, job_id)["cues"][3]["fit"]["overrun"] > 2.0
    for body, own, overrun in (({"max_speed": 2.0}, {"max_speed": 2.0}, 0.0),
                               ({"overflow": False}, {"max_speed": 2.0, "overflow": False}, 0.3),
                               (None, None, 7.0 / 1.2 - 3.8)):
        edited = client.patch(f"/v1/dubs/{job_id}/cues/4", json={"fit": body})
        assert edited.status_code == 200 and edited.json()["cues"][3]["own_fit"] == own
        assert client.post(f"/v1/dubs/{job_id}/resume").status_code == 202
        cue = wait(client, job_id)["cues"][3]
        assert cue["fit"]["overrun"] == pytest.approx(overrun, abs=0.002) and cue["takes"] == 1
    assert len(engine.requests) == 5
    refused = client.patch(f"/v1/dubs/{job_id}/cues/4", json={"fit": {"speed": 2}}).json()["error"]
    assert refused["code"] == "dub_fit_invalid" and "cue 4's fit has no setting 'speed'" in refused["message"]


@pytest.mark.parametrize("case, status, code", [
    ("overlap", 422, "dub_cues_overlap"),
    ("not_media", 422, "dub_media_unreadable"),
    ("unknown", 404, "dub_job_unknown"),
    ("bad_file", 404, "dub_file_unknown"),
    ("json", 415, "unsupported_media_type"),
    ("consent", 428, "consent_required"),
])
def test_refusals_in_the_api_shape(video: Path, tmp_path: Path, case, status, code) -> None:
    client = client_for(tmp_path, DubFake(), require_consent=case == "consent")
    if case == "overlap":
        response = start(client, video, srt_of([*LINES[:2], (8.0, 12.4, "Alice", "", "好。"), *LINES[3:]]))
    elif case == "not_media":
        response = client.post("/v1/dubs", files={"media": ("talk.mp4", b"not a video", "video/mp4"),
                                                  "cues": ("c.srt", srt_of().encode(), "text/plain")})
    elif case == "unknown":
        response = client.get("/v1/dubs/0123456789abcdef")
    elif case == "bad_file":
        job_id = start(client, video).json()["id"]
        wait(client, job_id)
        response = client.get(f"/v1/dubs/{job_id}/files/passwd")
    elif case == "json":
        response = client.post("/v1/dubs", json={"media": "x"})
    else:
        response = start(client, video)
        assert start(client, video, consent="true").status_code == 202
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert str(tmp_path) not in response.text


@pytest.mark.slow
def test_the_cue_table_is_edited_over_rest(video: Path, tmp_path: Path) -> None:
    """Translate or fix a cue's words, regenerate a cue, pick its earlier take back, lock it; resume renders only the
    edited cue and exports again. Changes are refused while the job renders."""
    engine = DubFake()
    client = client_for(tmp_path, engine)
    job_id = start(client, video).json()["id"]
    wait(client, job_id)
    edited = client.patch(f"/v1/dubs/{job_id}/cues/3", json={"text": "好。"})
    assert edited.status_code == 200 and edited.json()["cues"][2]["text"] == "好。"
    again = client.post(f"/v1/dubs/{job_id}/cues/1/regenerate")
    assert again.status_code == 200 and again.json()["cues"][0]["takes"] == 2
    picked = client.patch(f"/v1/dubs/{job_id}/cues/1", json={"take": 1, "locked": True}).json()["cues"][0]
    assert picked["locked"] is True
    assert client.post(f"/v1/dubs/{job_id}/cues/1/regenerate").json()["error"]["code"] == "cue_locked"
    asked = len(engine.requests)
    engine.release.clear()
    assert client.post(f"/v1/dubs/{job_id}/resume").status_code == 202
    wait(client, job_id, until=("running",))
    busy = client.patch(f"/v1/dubs/{job_id}/cues/2", json={"locked": True})
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "dub_busy"
    engine.release.set()
    job = wait(client, job_id)
    assert job["status"] == "done" and [r.text for r in engine.requests[asked:]] == ["好。"]
    assert parse(client.get(f"/v1/dubs/{job_id}/files/srt").text)[2].text.endswith("好。")
    for body, code in (({"take": 9}, "take_unknown"), ({"mode": "sing"}, "dub_mode_unknown"),
                       ({"fit": {"min_speed": 3}}, "dub_speed_range"), ({"text": " "}, "dub_cue_text_empty")):
        assert client.patch(f"/v1/dubs/{job_id}/cues/2", json=body).json()["error"]["code"] == code
    assert client.patch(f"/v1/dubs/{job_id}/cues/9", json={"locked": True}).status_code == 404
