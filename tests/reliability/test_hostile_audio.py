"""Hostile recordings: decompression bombs, headers that lie, malformed data: URLs, at every door that takes audio.

What is promised, and checked here:

- Memory: refusing (or serving) any recording under the 20 MB body cap costs at most 64 MB of peak extra memory
  (`MAX_EXTRA_MB`), measured as the growth of `ru_maxrss` in a forked child of a fresh interpreter, one child per
  recording and door. The largest cost is a door's whole sample budget served (10 minutes at 24 kHz for a VC
  source or a transcription: about 59 MB); refusing a bomb at its header costs about 2 MB. Decoding the 8-channel
  bomb whole, as the reader did before, costs about 575 MB (also measured here, as the calibration's contrast).
- The header check refuses before decoding: with the block reader replaced by a failure, every bomb whose header
  tells its size is still refused, with its specific code.
- The running cap stops a stream whose header says nothing ("length unknown") or says too little: it stops
  within one block past the door's cap.
- Malformed data: URLs (no comma, not base64, empty) are a specific 4xx on every REST route and Gradio API tool
  that takes audio, never a 5xx.
- The transcription door has its own limit (600 s, `asr_audio_too_long`), not the prompt's.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient

from cosyvoice_ui import audio, audio_read
from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.web.server import create_app

from . import corpus
from .corpus import PROMPT_LIMIT, VALID_TEXT, Refusal, check_clean, silence_file, voice, wav_bytes
from tests.web_client import LOOPBACK

REPO = Path(__file__).resolve().parents[2]
MAX_EXTRA_MB = 64.0

BOMBS = {  # name → bytes maker; each under the 20 MB body cap
    "8-channel-6.5-min": corpus.eight_channel_bomb,
    "1-hour-flac": corpus.hour_of_flac,
    "flac-without-length": corpus.flac_without_length,
    "vorbis-10-min": corpus.vorbis_bomb,
    "mp3-200-s": corpus.mp3_bomb,
    "384-khz": lambda: silence_file("FLAC", 384000, 1, 1.0),
    "768-khz": lambda: silence_file("WAV", 768000, 1, 0.25),
    "200-channels": lambda: silence_file("WAV", 16000, 200, 0.1),
    "192-khz-stereo-40-s": lambda: silence_file("FLAC", 192000, 2, 40),
    "10-min-24-khz": lambda: silence_file("FLAC", 24000, 1, 600),  # a whole VC/transcription budget
}
DOORS = {"prompt": audio.PROMPT_LIMITS, "source": audio.SOURCE_LIMITS, "transcription": audio.TRANSCRIPTION_LIMITS}
SERVED = "served"
OUTCOMES = {  # (bomb, door) → the refusal code, or SERVED (then a later check refuses silence)
    "8-channel-6.5-min": ("prompt_too_long", "audio_too_large", "audio_too_large"),
    "1-hour-flac": ("prompt_too_long", "prompt_too_long", "asr_audio_too_long"),
    "flac-without-length": ("prompt_too_long", "prompt_too_long", "asr_audio_too_long"),
    "vorbis-10-min": ("prompt_too_long", SERVED, SERVED),
    "mp3-200-s": ("prompt_too_long", SERVED, SERVED),
    "384-khz": ("audio_rate_unsupported",) * 3,
    "768-khz": ("audio_rate_unsupported",) * 3,
    "200-channels": ("audio_too_many_channels",) * 3,
    "192-khz-stereo-40-s": ("audio_too_large", SERVED, SERVED),
    "10-min-24-khz": ("prompt_too_long", SERVED, SERVED),
}
HEADER_TELLS = [name for name in BOMBS if name != "flac-without-length"]

# Run in a fresh interpreter: each measurement forks, so the child starts from the parent's resident set (the
# recording already in memory, as a request body is) and its ru_maxrss high-water mark grows only by the reading.
MEASURE = r"""
import io, json, os, resource, sys
import numpy as np
import soundfile
from cosyvoice_ui import audio
from cosyvoice_ui.errors import InvalidRequest

def measure(work):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            work()
            outcome = "served"
        except InvalidRequest as exc:
            outcome = exc.code
        extra = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        os.write(write, json.dumps([outcome, extra]).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = json.loads(pipe.read())
    os.waitpid(pid, 0)
    return answer

files, doors = json.loads(sys.argv[1]), {"prompt": audio.PROMPT_LIMITS, "source": audio.SOURCE_LIMITS,
                                         "transcription": audio.TRANSCRIPTION_LIMITS}
results = {"control: 100 MB touched": measure(lambda: np.ones(25_000_000, np.float32))}
for name, path in files.items():
    data = open(path, "rb").read()
    for door, limits in doors.items():
        results[f"{name} @ {door}"] = measure(lambda: audio.read_audio(data, "recording", limits))
    if name == "8-channel-6.5-min":
        results["whole decode (the old reader)"] = measure(
            lambda: soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True))
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, tuple[str, float]]:
    folder = tmp_path_factory.mktemp("bombs")
    files = {}
    for name, make in BOMBS.items():
        data = make()
        assert len(data) < corpus.UPLOAD_CAP_MB * 2**20, name
        (folder / name).write_bytes(data)
        files[name] = str(folder / name)
    done = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(files)], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    results = {name: (outcome, extra) for name, (outcome, extra) in json.loads(done.stdout).items()}
    print("\npeak extra memory (MB) while reading:")
    for name, (outcome, extra) in results.items():
        print(f"  {name:42s} {outcome:24s} {extra:7.1f}")
    return results


def test_the_measurement_sees_memory(measured) -> None:
    """Calibration: 100 MB touched reads as about 100 MB, and a whole decode of the 8-channel bomb as hundreds."""
    assert 90 <= measured["control: 100 MB touched"][1] <= 110
    assert measured["whole decode (the old reader)"][1] > 400


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("bomb", BOMBS)
def test_reading_a_bomb_stays_under_the_memory_bound(measured, bomb: str, door: str) -> None:
    outcome, extra = measured[f"{bomb} @ {door}"]
    assert outcome == OUTCOMES[bomb][list(DOORS).index(door)]
    assert extra <= MAX_EXTRA_MB, f"{bomb} at the {door} door cost {extra:.1f} MB"


# --- the header is checked before anything is decoded ---------------------------------------------------------


@pytest.fixture()
def no_decoding(monkeypatch) -> list[str]:
    """The block reader replaced by a failure; returns the names of the recordings it was asked to decode."""
    asked: list[str] = []

    def refuse_to_decode(sound, frames, what, limits):
        asked.append(what)
        raise RuntimeError("decoding is off in this test")

    monkeypatch.setattr(audio_read, "read_blocks", refuse_to_decode)
    return asked


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("bomb", HEADER_TELLS)
def test_the_header_refuses_before_decoding(no_decoding, bomb: str, door: str) -> None:
    expected = OUTCOMES[bomb][list(DOORS).index(door)]
    with pytest.raises(InvalidRequest) as refused:
        audio.read_audio(BOMBS[bomb](), "recording", DOORS[door])
    if expected == SERVED:  # within the door's limits: decoding was asked for (and failed, as the test made it)
        assert no_decoding == ["recording"] and refused.value.code == "audio_unreadable"
        return
    assert not no_decoding, "decoded a recording its header should have refused"
    assert refused.value.code == expected
    check_clean(refused.value.message)


def test_refusals_say_what_is_wrong_and_how_to_fix_it(no_decoding) -> None:
    cases = [("8-channel-6.5-min", "prompt", ("390.0 s", "at most 30 s", "trim")),
             ("8-channel-6.5-min", "transcription", ("390.0 s", "8-channel", "48000 Hz", "mono")),
             ("1-hour-flac", "transcription", ("3600.0 s", "at most 600 s")),
             ("200-channels", "prompt", ("200 channels", "at most 8", "mono or stereo")),
             ("384-khz", "source", ("384000 Hz", "16, 24 or 48 kHz"))]
    for bomb, door, words in cases:
        with pytest.raises(InvalidRequest) as refused:
            audio.read_audio(BOMBS[bomb](), "recording", DOORS[door])
        message = refused.value.message
        assert all(w in message for w in words), message
        check_clean(message)


# --- the running cap --------------------------------------------------------------------------------------------


@pytest.fixture()
def decoded_frames(monkeypatch) -> list[int]:
    """Counts the frames the reader decodes."""
    counts: list[int] = []
    real = sf.SoundFile.read

    def counting(self, *args, **kwargs):
        got = real(self, *args, **kwargs)
        counts.append(len(got))
        return got

    monkeypatch.setattr(sf.SoundFile, "read", counting)
    return counts


@pytest.mark.parametrize("door", DOORS)
def test_the_running_cap_stops_a_stream_without_a_length(decoded_frames, door: str) -> None:
    data = corpus.flac_without_length()
    with sf.SoundFile(io.BytesIO(data)) as sound:
        assert sound.frames == audio_read.UNKNOWN_LENGTH  # the header says nothing the check could use
    limits = DOORS[door]
    with pytest.raises(InvalidRequest) as refused:
        audio.read_audio(data, "recording", limits)
    assert refused.value.code == OUTCOMES["flac-without-length"][list(DOORS).index(door)]
    assert "more than" in refused.value.message
    cap = limits.frames_cap(16000, 1)
    assert cap < sum(decoded_frames) <= cap + audio_read.BLOCK_FRAMES  # stopped within one block past the cap


def test_the_running_cap_stops_a_stream_longer_than_its_header_says(decoded_frames, monkeypatch) -> None:
    """A header that says 1 s over an hour of FLAC (as a decoder's wrong estimate would): the reader believes it
    for its first buffer, then stops the stream at the door's cap, never holding the hour."""
    import tracemalloc

    data = corpus.hour_of_flac()
    monkeypatch.setattr(sf.SoundFile, "frames", property(lambda self: 16000))
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRequest) as refused:
            audio.read_audio(data, "prompt audio")
        peak = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert refused.value.code == "prompt_too_long" and "more than" in refused.value.message
    assert all(w in refused.value.message for w in PROMPT_LIMIT)
    cap = audio.PROMPT_LIMITS.frames_cap(16000, 1)
    assert cap < sum(decoded_frames) <= cap + audio_read.BLOCK_FRAMES
    assert peak < MAX_EXTRA_MB, f"{peak:.1f} MB traced"


def test_a_stream_shorter_than_its_header_is_served() -> None:
    audio_in = audio.read_audio(corpus.wav_claiming_more())
    assert abs(audio_in.duration - 4.0) < 0.01 and np.isfinite(audio_in.samples).all()


def test_blocks_mix_down_exactly_as_a_whole_decode_did() -> None:
    """Saved voices' features are keyed by the audio's hash: the block reader must give the same samples."""
    stereo = np.stack([voice(3.0, 44100), voice(3.0, 44100)[::-1] * 0.5], 1)
    for data in (wav_bytes(stereo, 44100), wav_bytes(stereo, 44100, fmt="FLAC"), wav_bytes(voice(), subtype="FLOAT")):
        whole, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
        read = audio.read_audio(data)
        assert read.sample_rate == rate and np.array_equal(read.samples, whole.mean(axis=1))


# --- every door: REST, Gradio API, UI, CLI ------------------------------------------------------------------------

NOT_BASE64 = Refusal("audio_not_base64", ("base64",))
EMPTY = Refusal("audio_unreadable", ("empty",))
BAD_DATA_URLS = [("no-comma", "data:audio/wav", NOT_BASE64), ("scheme-only", "data:", NOT_BASE64),
                 ("base64-without-comma", "data:audio/wav;base64", NOT_BASE64),
                 ("percent-encoded", "data:audio/wav,RIFF%00%00%00WAVE", NOT_BASE64),
                 ("bad-characters", "data:audio/wav;base64,***not base64***", NOT_BASE64),
                 ("upper-case-no-comma", "DATA:AUDIO/WAV;BASE64", NOT_BASE64),
                 ("empty-payload", "data:audio/wav;base64,", EMPTY)]
GOOD = "data:audio/wav;base64," + base64.b64encode(wav_bytes(voice())).decode()


@pytest.fixture(scope="module")
def served(tiny_sft: Path, tmp_path_factory):
    work = tmp_path_factory.mktemp("hostile-audio")
    settings = Settings(model_dir=tiny_sft, voices_dir=work / "voices", device="cpu", idle_unload_s=0,
                        rate_limit_per_min=0, extra={"output_dir": str(work / "outputs")})
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False, base_url=LOOPBACK) as client:
        yield client, app, work


def audio_routes(value: str) -> dict[str, tuple[str, dict]]:
    return {"tts-prompt_audio": ("/tts", {"text": VALID_TEXT, "mode": "cross_lingual", "prompt_audio": value}),
            "tts-source_audio": ("/tts", {"mode": "vc", "source_audio": value, "prompt_audio": GOOD}),
            "voices": ("/v1/voices", {"name": "hostile", "audio": value}),
            "transcribe": ("/v1/transcribe", {"audio": value})}


def assert_refused(response, expect: Refusal) -> None:
    assert 400 <= response.status_code < 500, f"{response.status_code}: {response.text[:300]}"
    error = response.json()["error"]
    expect.check(error["code"], error["message"])


@pytest.mark.parametrize("route", list(audio_routes("")))
@pytest.mark.parametrize(("case", "value", "expect"), BAD_DATA_URLS, ids=[c[0] for c in BAD_DATA_URLS])
def test_malformed_data_urls_are_a_4xx_on_every_rest_route(served, route: str, case: str, value: str,
                                                             expect: Refusal) -> None:
    path, body = audio_routes(value)[route]
    assert_refused(served[0].post(path, json=body), expect)


def test_a_data_url_in_a_transcription_upload_is_unreadable_audio(served) -> None:
    response = served[0].post("/v1/audio/transcriptions", files={"file": ("voice.wav", b"data:audio/wav", "audio/wav")})
    assert_refused(response, Refusal("audio_unreadable", ("could not be read",)))


def test_the_transcription_routes_have_their_own_limit(served) -> None:
    """The same recordings get the transcription door's refusals, not the prompt's."""
    client = served[0]
    hour = base64.b64encode(corpus.hour_of_flac()).decode()
    assert_refused(client.post("/v1/transcribe", json={"audio": hour}),
                   Refusal("asr_audio_too_long", ("3600.0 s", "at most 600 s")))
    assert_refused(client.post("/v1/audio/transcriptions", files={"file": ("a.flac", corpus.hour_of_flac())}),
                   Refusal("asr_audio_too_long", ("3600.0 s", "at most 600 s")))
    assert_refused(client.post("/v1/transcribe", json={"audio": base64.b64encode(
        corpus.eight_channel_bomb()).decode()}), Refusal("audio_too_large", ("8-channel", "mono")))
    assert_refused(client.post("/tts", json={"text": VALID_TEXT, "mode": "cross_lingual", "prompt_audio": hour}),
                   Refusal("prompt_too_long", ("3600.0 s", *PROMPT_LIMIT)))
    # Two and a half minutes: too long to read as a prompt, read whole to be transcribed.
    long_voice = wav_bytes(np.tile(voice(), 38), fmt="FLAC")
    assert audio.read_audio(long_voice, "recording", audio.TRANSCRIPTION_LIMITS).duration == pytest.approx(152)
    with pytest.raises(InvalidRequest, match="at most 30 s"):
        audio.read_audio(long_voice)


def test_a_vc_source_is_read_to_its_own_limit(served) -> None:
    """A VC source may be 300 s after trimming: 200 s of MP3 is read (and refused as silent), not cut at 120 s."""
    mp3 = base64.b64encode(corpus.mp3_bomb()).decode()
    response = served[0].post("/tts", json={"mode": "vc", "source_audio": mp3, "prompt_audio": GOOD})
    assert_refused(response, Refusal("prompt_silent", ("source", "silent")))


@pytest.fixture(scope="module")
def api_tools(served):
    from cosyvoice_ui.ui.api_tools import Endpoints, _public, build_functions

    functions = build_functions(Endpoints(served[1].state.api, served[2] / "api-out"))
    return {name: _public(fn, name) for name, fn in functions.items()}


def tool_calls(value) -> dict:
    return {"clone": lambda tools: tools["clone"](VALID_TEXT, value, "hello"),
            "cross_lingual": lambda tools: tools["cross_lingual"](VALID_TEXT, value),
            "convert-source": lambda tools: tools["convert"](value, file_data_of(GOOD_FILE)),
            "convert-target": lambda tools: tools["convert"](file_data_of(GOOD_FILE), value),
            "save_voice": lambda tools: tools["save_voice"]("hostile", value, "")}


GOOD_FILE: list[Path] = []


def file_data_of(paths: list[Path]) -> dict:
    return {"path": str(paths[0]), "orig_name": paths[0].name, "meta": {"_type": "gradio.FileData"}}


@pytest.mark.parametrize("tool", list(tool_calls(None)))
@pytest.mark.parametrize(("case", "value", "expect"), BAD_DATA_URLS, ids=[c[0] for c in BAD_DATA_URLS])
def test_malformed_data_urls_are_refused_by_every_gradio_api_tool(served, api_tools, tool: str, case: str,
                                                                  value: str, expect: Refusal) -> None:
    """A string is never read as a file (Gradio's MCP layer turns data: URLs into files first): the tool answers
    with the form it takes. A file holding the malformed URL is unreadable audio."""
    import gradio as gr

    if not GOOD_FILE:
        GOOD_FILE.append(served[2] / "good.wav")
        GOOD_FILE[0].write_bytes(wav_bytes(voice()))
    with pytest.raises(gr.Error) as refused:
        tool_calls(value)[tool](api_tools)
    assert "uploaded audio file" in refused.value.message and "data:audio" in refused.value.message
    check_clean(refused.value.message, str(served[2]))
    holder = served[2] / f"{case}.wav"
    holder.write_text(value)
    with pytest.raises(gr.Error) as refused:
        tool_calls(file_data_of([holder]))[tool](api_tools)
    assert "could not be read" in refused.value.message, refused.value.message
    check_clean(refused.value.message, str(served[2]))


def test_a_bomb_through_the_gradio_api_is_refused_at_the_header(served, api_tools, no_decoding) -> None:
    import gradio as gr

    path = served[2] / "bomb.flac"
    path.write_bytes(corpus.eight_channel_bomb())
    with pytest.raises(gr.Error, match="390.0 s"):
        api_tools["save_voice"]("bomb", file_data_of([path]), "")


def test_ui_and_cli_transcription_use_the_transcription_limit(tmp_path: Path, capsys, no_decoding) -> None:
    from cosyvoice_ui.cli.main import main
    from cosyvoice_ui.ui.transcribe import transcribe_file

    path = tmp_path / "hour.flac"
    path.write_bytes(corpus.hour_of_flac())
    with pytest.raises(InvalidRequest) as refused:
        transcribe_file(None, str(path))
    assert refused.value.code == "asr_audio_too_long" and "at most 600 s" in refused.value.message
    assert main(["transcribe", str(path), "--models-dir", str(tmp_path / "models")]) != 0
    err = capsys.readouterr().err
    assert "at most 600 s" in err and "Traceback" not in err and str(tmp_path) not in err


def test_the_ui_reads_a_vc_source_to_its_own_limit(tmp_path: Path) -> None:
    from cosyvoice_ui.ui.requests import request_from_meta

    path = tmp_path / "long.mp3"
    path.write_bytes(corpus.mp3_bomb())
    request = request_from_meta({"mode": "vc", "source": str(path)})
    assert request.source_audio is not None and request.source_audio.duration > 190
    with pytest.raises(InvalidRequest) as refused:
        request_from_meta({"mode": "cross_lingual", "prompt": str(path), "text": VALID_TEXT})
    assert refused.value.code == "prompt_too_long"


# --- the thin client: a remote's answer is bounded too --------------------------------------------------------------


def hostile_remote(monkeypatch, answer_seconds: float, sent: list[int]):
    """A RemoteEngine whose remote answers /tts with `answer_seconds` of audio, made as it is read (`sent` counts
    the seconds handed over)."""
    import httpx

    from cosyvoice_ui.serving import remote

    models = {"data": [{"name": "tiny", "family": "v1", "sample_rate": RATE, "modes": ["sft"], "speakers": ["a"]}]}
    second = bytes(2 * RATE)  # of 16-bit silence

    def pcm():
        for _ in range(int(answer_seconds)):
            sent.append(1)
            yield second

    def whole():  # the /tts JSON, its base64 made a second at a time (44100 bytes: a multiple of 3)
        yield b'{"audio": "'
        yield from (base64.b64encode(block) for block in pcm())
        yield b'", "sample_rate": %d}' % RATE

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=models)
        if json.loads(request.content).get("stream"):
            return httpx.Response(200, headers={"x-sample-rate": str(RATE)}, content=pcm())
        return httpx.Response(200, headers={"content-type": "application/json"}, content=whole())

    monkeypatch.setattr(remote, "_client", lambda key, timeout=None: httpx.Client(
        transport=httpx.MockTransport(handler)))
    return remote.RemoteEngine("http://remote.invalid")


RATE = 22050


@pytest.mark.parametrize("stream", [False, True])
def test_a_remote_sending_endless_audio_is_cut_off(monkeypatch, stream: bool) -> None:
    from cosyvoice_ui.serving.remote import RemoteError, answer_seconds
    from cosyvoice_ui.types import Mode, SynthesisRequest

    sent: list[int] = []
    engine = hostile_remote(monkeypatch, 3600, sent)
    request = SynthesisRequest(mode=Mode.SFT, text=VALID_TEXT, speaker="a", seed=1, stream=stream)
    limit = answer_seconds(request)
    assert limit < 120
    with pytest.raises(RemoteError, match="more than|larger answer") as refused:
        list(engine.synthesize(request))
    check_clean(str(refused.value))
    # Stopped reading soon after the limit (whole answers: its size at 48 kHz), not at the end of the hour.
    assert len(sent) <= (limit + 2 if stream else limit * 48000 / RATE + 20)
    fair = hostile_remote(monkeypatch, 5, [])
    assert sum(len(c.samples) for c in fair.synthesize(request)) == 5 * RATE


@pytest.mark.slow
def test_malformed_data_urls_over_mcp_are_clear_tool_errors(tiny_sft: Path, tmp_path: Path) -> None:
    """Over MCP, Gradio turns a data: URL into a file before the tool runs; a malformed one ends as a tool error
    that says what is wrong (never a server error, a traceback or a path)."""
    pytest.importorskip("mcp", reason="the mcp package is not installed (requirements.txt)")
    import asyncio

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from tests.ui.launch import running_app

    async def call_all(url: str):
        async with streamable_http_client(url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return [await asyncio.wait_for(session.call_tool("save_voice", {"name": "x", "audio": value}), 60)
                        for _, value, _ in BAD_DATA_URLS]

    with running_app(tiny_sft, tmp_path, "--mcp") as url:
        results = asyncio.run(call_all(url))
    for (case, _, _), result in zip(BAD_DATA_URLS, results):
        text = " ".join(c.text for c in result.content if getattr(c, "type", "") == "text")
        print(f"{case}: {text[:200]}")
        assert result.isError, (case, text)
        assert text.strip() and "Traceback" not in text and "object at 0x" not in text, (case, text)
        assert str(tmp_path) not in text and "/tmp/" not in text, (case, text)
