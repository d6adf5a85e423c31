"""The saved-voice store under faults (issue 13, fault tests): read-only or full, and `kill -9` mid-write.

A read-only or full store gets a specific 409 (REST) / stopping message (UI) that says what is wrong and how
to fix it; the voices already there are untouched and nothing half-written stays behind. Root ignores file
permissions, so besides a real `chmod` (skipped as root) the faults are simulated by making the file
operations under the store fail with the errno a read-only or full disk gives (a full disk after writing half).

Then a writer process is killed with SIGKILL at random moments and inside a commit, and restarted: every
stored voice, the default and every result file still read back whole.
"""

from __future__ import annotations

import base64
import errno
import io
import os
import pathlib
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_ui.api.routes import add_routes
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.serving.voices import VoiceLibrary, VoiceStoreUnwritable
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip
from tests.web_client import LOOPBACK

REPO = Path(__file__).resolve().parents[2]


def clip_b64(seconds: float = 4.0) -> str:
    clip = voice_clip(seconds)
    buffer = io.BytesIO()
    sf.write(buffer, clip.samples, clip.sample_rate, format="WAV")
    return base64.b64encode(buffer.getvalue()).decode()


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under `root`, hidden ones included."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.fixture()
def store(tmp_path: Path):
    """(client, library) of a REST app whose store already holds one voice, the default."""
    engine = FakeEngine(name="fake-model", speakers=("alice",))
    manager = ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda mid: engine.info)
    settings = Settings(voices_dir=tmp_path / "voices", rate_limit_per_min=0)
    app = FastAPI()
    service = add_routes(app, manager, settings)
    client = TestClient(app, base_url=LOOPBACK)
    added = client.post("/v1/voices", json={"name": "Kept", "transcript": "hello", "audio": clip_b64()})
    assert added.status_code == 201, added.text
    assert client.post("/v1/voices/kept/default").status_code == 200
    return client, service.library


class FaultyDisk:
    """Makes writes under `root` fail as a read-only (EACCES) or full (ENOSPC) disk does. A full disk lets
    folders be made and renamed, and writes half of a file before it fails."""

    def __init__(self, monkeypatch, root: Path, code: int) -> None:
        self.root, self.code = str(root), code
        full = code == errno.ENOSPC
        real_write_bytes = pathlib.Path.write_bytes

        def under(path) -> bool:
            return os.fspath(path).startswith(self.root)

        def failing(real):
            def call(*args, **kwargs):
                if under(args[0]):
                    raise OSError(code, os.strerror(code), os.fspath(args[0]))
                return real(*args, **kwargs)
            return call

        def write_bytes(path, data):
            if under(path):
                if full:
                    real_write_bytes(path, bytes(data)[: len(data) // 2])
                raise OSError(code, os.strerror(code), os.fspath(path))
            return real_write_bytes(path, data)

        monkeypatch.setattr(pathlib.Path, "write_bytes", write_bytes)
        monkeypatch.setattr(os, "replace", failing(os.replace))
        if not full:
            for name in ("mkdir", "rename", "unlink", "rmdir"):
                monkeypatch.setattr(os, name, failing(getattr(os, name)))


FAULTS = [(errno.EACCES, "voice_store_read_only", "read-only"), (errno.EROFS, "voice_store_read_only", "read-only"),
          (errno.ENOSPC, "voice_store_full", "full")]


def assert_clear(error: dict, code: str, word: str, root: Path) -> None:
    assert error["code"] == code and word in error["message"], error
    assert "--voices-dir" in error["message"], "the message does not say how to fix it"
    assert str(root) not in error["message"] and "Traceback" not in error["message"], error


@pytest.mark.parametrize(("code", "error_code", "word"), FAULTS, ids=["EACCES", "EROFS", "ENOSPC"])
def test_saving_a_voice_on_an_unwritable_store_is_refused_cleanly(store, monkeypatch, code: int,
                                                                   error_code: str, word: str) -> None:
    client, library = store
    before = snapshot(library.root)
    FaultyDisk(monkeypatch, library.root, code)
    response = client.post("/v1/voices", json={"name": "New", "transcript": "hi", "audio": clip_b64()})
    assert response.status_code == 409, response.text
    assert_clear(response.json()["error"], error_code, word, library.root)
    default = client.post("/v1/voices/kept/default")  # rewriting default.json fails the same way
    assert default.status_code == 409 and default.json()["error"]["code"] == error_code
    monkeypatch.undo()
    assert snapshot(library.root) == before, "the store changed: a voice was touched or a half-written file stays"
    assert [v["id"] for v in client.get("/v1/voices").json()["data"]] == ["kept"]
    assert library.default_id() == "kept" and library.audio("kept").duration > 3


def test_deleting_a_voice_on_a_read_only_store_leaves_it_whole(store, monkeypatch) -> None:
    client, library = store
    before = snapshot(library.root)
    FaultyDisk(monkeypatch, library.root, errno.EACCES)
    response = client.delete("/v1/voices/kept")
    assert response.status_code == 409
    assert_clear(response.json()["error"], "voice_store_read_only", "read-only", library.root)
    monkeypatch.undo()
    assert snapshot(library.root) == before, "a refused delete removed part of the voice"
    assert client.delete("/v1/voices/kept").status_code == 200, "a writable store deletes again"
    assert not library.ids() and not [p for p in library.root.iterdir() if p.name.startswith(".")]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root ignores file permissions; the simulated faults above cover this case")
def test_a_really_read_only_folder(store) -> None:
    client, library = store
    before = snapshot(library.root)
    library.root.chmod(0o500)
    try:
        response = client.post("/v1/voices", json={"name": "New", "audio": clip_b64()})
        assert response.status_code == 409
        assert_clear(response.json()["error"], "voice_store_read_only", "read-only", library.root)
        assert client.delete("/v1/voices/kept").status_code == 409
    finally:
        library.root.chmod(0o700)
    assert snapshot(library.root) == before


def test_the_ui_shows_the_store_message(tmp_path: Path, monkeypatch) -> None:
    """The UI's save button catches InvalidRequest and shows `strings.message`: the same clear sentence."""
    from cosyvoice_ui.serving.voice_service import save_voice
    from cosyvoice_ui.ui import strings

    engine = FakeEngine()
    manager = ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda mid: engine.info)
    library = VoiceLibrary(tmp_path / "voices")
    library.root.mkdir()
    FaultyDisk(monkeypatch, library.root, errno.ENOSPC)
    with pytest.raises(VoiceStoreUnwritable) as info:
        save_voice(manager, library, "Mine", voice_clip(4.0), "")
    for lang, full in (("en", "full"), ("zh", "磁盘已满")):
        text = strings.message(info.value, lang)
        assert full in text and "--voices-dir" in text and str(tmp_path) not in text
    monkeypatch.undo()
    assert not list(library.root.iterdir()), "a refused save left files behind"


# --- kill -9 while writing, then restart -------------------------------------------------------------------

WRITER = """
import os, signal, sys
from pathlib import Path

import numpy as np

root, outputs, kill_at = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
if kill_at:  # die inside the kill_at-th commit: the temp file is written, the rename not done
    real_replace, calls = os.replace, [0]

    def dying_replace(src, dst):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst)

    os.replace = dying_replace

from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.serving.voices import VoiceLibrary
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.ui.handlers import Handlers

library = VoiceLibrary(root)
handlers = Handlers(ModelManager("none", loader=None, idle_unload_s=0), Settings(voices_dir=root), outputs)
clip, wave = voice_clip(4.0), np.linspace(-0.5, 0.5, FRAMES, dtype=np.float32)
for i in range(10_000):
    voice = library.add(f"voice {os.getpid()} {i}", clip, "a transcript")
    library.set_default(voice.id)
    handlers._save(wave, 16000, "wav")  # where the UI writes each result (its history's files)
    if i % 3 == 2:
        library.remove(voice.id)
    if i == 0:
        print("ready", flush=True)
"""
FRAMES = 48_000
RUNS = [0, 0, 0, 0, 0, 2, 4]  # five kills at random moments, then two inside a commit (voice.json, result)


def run_writer(script: Path, root: Path, outputs: Path, kill_at: int, rng: random.Random) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(script), str(root), str(outputs), str(kill_at)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        line = proc.stdout.readline()  # "ready", or "" when it killed itself first
        if line.strip() == "ready":
            try:
                proc.wait(rng.uniform(0.05, 0.6))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, f"the writer ended on its own: {proc.stderr.read()[-2000:]}"


def test_kill_9_while_writing_then_restart_keeps_every_record_whole(tmp_path: Path) -> None:
    from cosyvoice_ui.ui.handlers import Handlers

    script = tmp_path / "writer.py"
    script.write_text(WRITER.replace("FRAMES", str(FRAMES)))
    root, outputs = tmp_path / "voices", tmp_path / "outputs"
    rng = random.Random(13)
    for kill_at in RUNS:
        run_writer(script, root, outputs, kill_at, rng)
    # Restart: what the app builds at startup sweeps the leftovers of the killed writers.
    library = VoiceLibrary(root)
    Handlers(ModelManager("none", idle_unload_s=0), Settings(voices_dir=root), outputs)
    everything = list(root.rglob("*")) + list(outputs.rglob("*"))
    assert not [p.name for p in everything if p.name.endswith(".tmp")], "temp files of killed writers remain"
    # (the store's listing index, `.index.json`, is no scratch: it is kept on purpose)
    assert not [p.name for p in root.iterdir() if p.name.startswith(".") and p.name != ".index.json"], \
        "scratch folders remain"
    ids = library.ids()
    assert ids, "the writer never saved a voice"
    for entry in root.iterdir():
        assert entry.name in ("default.json", ".index.json") or entry.name in ids, f"{entry.name} is not a complete voice"
    for voice_id in ids:
        voice = library.get(voice_id)
        assert voice is not None, f"{voice_id}: voice.json is unreadable"
        assert {p.name for p in library.path(voice_id).iterdir()} == {"voice.json", "prompt.wav"}
        assert abs(library.audio(voice_id).duration - voice.duration_s) < 0.01, f"{voice_id}: prompt.wav is cut"
    default = root / "default.json"
    if default.exists():
        assert library.default_id() in ids, "default.json is half-written or names a missing voice"
    results = sorted(outputs.iterdir())
    assert results, "the writer never saved a result"
    for path in results:
        assert sf.info(path).frames == FRAMES, f"{path.name} is cut short"
