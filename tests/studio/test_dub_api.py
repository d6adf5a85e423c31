"""Dubbing over REST: POST /v1/dubs with a video and its subtitles starts a background job in the model queue; its
progress and cue table are read back, its files fetched (the video with the copied stream and two tagged tracks,
the adjusted SRT); a stopped job resumes with only the missing cues; refusals and unknown ids answer in the API's
one error shape; consent is asked for a voice cut from the upload where the server requires it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_ui.api.routes import add_routes
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.serving.subtitles import parse
from cosyvoice_ui.settings import Settings
from tests.web_client import LOOPBACK

from .dub_media_kit import LINES, make_video, srt_of, streams
from .test_dub import RATE, DubFake, source_track


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
