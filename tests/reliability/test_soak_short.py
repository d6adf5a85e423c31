"""The soak (benchmarks/soak.py), short: the real app on a tiny model, 4 concurrent clients x 5 requests of every
kind on loopback. Nothing fails or is lost, and RSS, fds, threads and temp files stay within the script's bounds
after its warm-up. Latencies are printed by the script, never checked here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.web_client import LOOPBACK

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "soak.py"
KINDS = {"tts", "speech", "speech_stream", "voice_create", "voice_list", "voice_delete", "gradio_synthesize",
         "gradio_list_voices"}


@pytest.fixture(scope="module")
def soak(tiny_sft: Path, tmp_path_factory) -> tuple[dict, Path]:
    work = tmp_path_factory.mktemp("soak")
    done = subprocess.run([sys.executable, str(SCRIPT), "--model-dir", str(tiny_sft), "--clients", "4",
                           "--requests", "5", "--warmup-cycles", "1", "--max-seconds", "300", "--settle-seconds", "2",  # 4 clients: few threads
                           "--work-dir", str(work), "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=420)
    log = (work / "app" / "app.log").read_text(errors="replace")[-3000:] if (work / "app" / "app.log").exists() else ""
    assert done.stdout.strip(), f"no report:\n{done.stderr[-3000:]}\napp log:\n{log}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == (0 if result["ok"] else 1)
    return result, work


def test_every_request_of_every_kind_is_served(soak) -> None:
    result, _ = soak
    assert result["problems"] == [], result["problems"]
    assert result["failed"] == 0 and result["lost"] == 0, result["failures"]
    assert result["completed"] == result["requests"] >= 4 * 5
    assert set(result["latency"]) == KINDS
    assert set(result["kinds_completed"]) == KINDS
    assert result["warmup"]["failed"] == 0 and result["warmup"]["lost"] == 0, result["warmup"]["failures"]
    assert result["peak_queue"]["peak_running"] >= 1  # /health saw the queue at work


def test_no_growth_beyond_the_bounds_after_warm_up(soak) -> None:
    result, _ = soak
    limits, growth = result["bounds"]["limits"], result["bounds"]["growth"]
    assert set(growth) == {"rss_mb", "fds", "threads", "temp_files", "voice_files"}
    for name, limit in limits.items():
        assert growth[name] <= limit, f"{name} grew by {growth[name]} (bound {limit})"
    assert growth["voice_files"] <= 0  # every voice the clients saved was deleted again
    for phase in ("before", "warm", "after"):
        snapshot = result["resources"][phase]
        assert snapshot["rss_mb"] > 0 and snapshot["fds"] > 0 and snapshot["threads"] > 0, phase


def test_the_temp_folders_are_the_apps_own(soak) -> None:
    """The child's temp dirs were private to the run, so the counts are the app's files and nobody else's."""
    result, work = soak
    after = result["resources"]["after"]
    assert set(after["files"]) == {"gradio_tmp", "tmp", "outputs"}
    assert after["files"]["gradio_tmp"] >= 1  # Gradio results were cached there, not in the system temp dir
    assert (work / "app" / "gradio_tmp").is_dir()


def test_the_worker_pool_outgrows_a_full_queue(tmp_path: Path) -> None:
    """Found by the soak's probes: every job waiting in the model queue holds a worker thread, and with anyio's
    default 40 a queue of 40 left none for /health or the voice list (they answered only once it drained)."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from cosyvoice_ui.api.routes import THREAD_HEADROOM, add_routes
    from cosyvoice_ui.serving.manager import ModelManager
    from cosyvoice_ui.settings import Settings
    from cosyvoice_ui.testing.fakes import FakeEngine

    engine = FakeEngine(speakers=("A",))
    manager = ModelManager("fake", loader=lambda model_id, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda model_id: engine.info)
    app = FastAPI()
    add_routes(app, manager, Settings(voices_dir=tmp_path / "voices", queue_size=100, concurrency=2))

    @app.get("/pool-size")
    async def pool_size() -> int:
        from anyio import to_thread

        return to_thread.current_default_thread_limiter().total_tokens

    with TestClient(app, base_url=LOOPBACK) as client:  # the lifespan runs: the app has started
        assert client.get("/pool-size").json() == 100 + 2 + THREAD_HEADROOM
        assert client.get("/health").status_code == 200


def test_saving_a_voice_counts_against_the_queue_limit(tmp_path: Path) -> None:
    """A saved voice's features are computed by a queued job: with the queue full it is refused (503 + Retry-After)
    like synthesis, rather than one more worker thread waiting without limit."""
    import base64
    import io

    import soundfile as sf
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from cosyvoice_ui.api.routes import add_routes
    from cosyvoice_ui.serving.manager import ModelManager
    from cosyvoice_ui.settings import Settings
    from cosyvoice_ui.testing.fakes import FakeEngine
    from cosyvoice_ui.testing.signals import voice_clip

    engine = FakeEngine(speakers=("A",))
    manager = ModelManager("fake", loader=lambda model_id, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda model_id: engine.info)
    app = FastAPI()
    add_routes(app, manager, Settings(voices_dir=tmp_path / "voices", queue_size=0))  # always full
    clip, wav = voice_clip(4.0, 16000), io.BytesIO()
    sf.write(wav, clip.samples, clip.sample_rate, format="WAV")
    with TestClient(app, base_url=LOOPBACK) as client:
        response = client.post("/v1/voices", json={"name": "narrator", "audio": base64.b64encode(wav.getvalue())
                                                   .decode(), "transcript": "hello there"})
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "queue_full" and response.headers["Retry-After"]
    assert not any((tmp_path / "voices").glob("narrator*"))  # refused before anything was stored
