"""The engine on a real local Ray Serve cluster: two CPU replicas of tiny models behind the app's own routes.

In file order: routing and auth, spread over replicas, streaming, cancel on disconnect, shared voices, a
replica killed mid-request, the thin client, and last scale to zero (it redeploys the app).
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import soundfile as sf

from conftest import API_KEY, PORT, cluster_config

SPEAKER = "英文女"
LONG_TEXT = " ".join(["This sentence keeps the engine busy for a while, one segment after another."] * 12)


def worker_stats(expected: int = 2, tries: int = 60, pool: str = "EngineWorker") -> dict[str, dict]:
    """Every idle replica's own stats, by replica id (a busy replica is skipped by Serve's router)."""
    from ray import serve

    from cosyvoice_ui.cluster.config import APP_NAME

    handle = serve.get_deployment_handle(pool, APP_NAME)
    seen: dict[str, dict] = {}
    for _ in range(tries):
        stats = handle.stats.remote().result(timeout_s=30)
        seen[stats["replica"]] = stats
        if len(seen) >= expected:
            break
    return seen


def tts(client, text: str = "Hello from the cluster.", seed: int = 1, **fields):
    return client.post("/tts", json={"text": text, "mode": "sft", "speaker": SPEAKER, "seed": seed, **fields})


def decoded(response) -> np.ndarray:
    payload = response.json()
    samples, _ = sf.read(io.BytesIO(base64.b64decode(payload["audio"])))
    return samples


def test_routes_keys_and_models(client):
    health = client.get("/health").json()
    assert health["status"] == "ok"
    assert health["cluster"]["replicas"]["running"] == 2
    assert health["cluster"]["models"] == ["tiny-a", "tiny-b"]
    import httpx

    refused = httpx.post(f"http://127.0.0.1:{PORT}/tts", json={"text": "hi"})
    assert refused.status_code == 401  # the same guard as one process
    listed = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert listed == ["tiny-a", "tiny-b"]
    a = tts(client, seed=3)
    b = tts(client, seed=3, model="tiny-b")
    assert a.status_code == 200 and b.status_code == 200, (a.text, b.text)
    assert not np.array_equal(decoded(a), decoded(b))  # two different random models spoke
    seen = client.get("/health").json()["cluster"]["seen"]
    assert {"tiny-a", "tiny-b"} <= {m for r in seen.values() for m in r["models"]}
    unknown = tts(client, model="no-such-model")
    assert unknown.status_code == 404
    error = unknown.json()["error"]
    assert error["code"] == "model_not_found" and "tiny-b" in error["message"]


def test_requests_spread_over_replicas(client):
    before = {rid: s["served"] for rid, s in worker_stats().items()}
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda seed: tts(client, seed=100 + seed), range(8)))
    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers if a.status_code != 200]
    after = worker_stats()
    served = {rid: after[rid]["served"] - before.get(rid, 0) for rid in after}
    assert len(served) == 2 and all(n >= 1 for n in served.values()), served
    assert sum(served.values()) == 8


def test_mixed_model_burst_does_not_reload(client):
    """Each replica holds every model (models_per_replica 0): a burst of mixed ids loads each model at most once
    per replica, instead of a reload per request (Serve's multiplexing with room for one model thrashes)."""
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: tts(client, seed=300 + i, model=("tiny-a", "tiny-b")[i % 2]), range(16)))
    assert [a.status_code for a in answers] == [200] * 16
    stats = worker_stats()
    assert sum(s["loads"] for s in stats.values()) <= 2 * 2, {r: (s["loads"], s["loaded"]) for r, s in stats.items()}
    assert all(set(s["loaded"]) <= {"tiny-a", "tiny-b"} for s in stats.values())


def test_streaming_arrives_in_pieces(client):
    reads, started, first = [], time.perf_counter(), None
    with client.stream("POST", "/tts", json={"text": LONG_TEXT[:400], "mode": "sft", "speaker": SPEAKER,
                                              "seed": 5, "stream": True, "format": "pcm"}) as response:
        assert response.status_code == 200
        for data in response.iter_raw():
            first = first or time.perf_counter() - started
            reads.append(len(data))
    total = time.perf_counter() - started
    assert len(reads) >= 2 and sum(reads) % 2 == 0 and sum(reads) > 0
    assert first < total  # audio left before the job ended
    events = []
    with client.stream("POST", "/v1/audio/speech", json={"model": "tiny-a", "input": "Streamed as events.",
                                                         "voice": SPEAKER, "stream_format": "sse",
                                                         "response_format": "pcm"}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:])["type"])
    assert events[-1] == "speech.audio.done" and "speech.audio.delta" in events


def test_disconnect_cancels_the_job(client):
    before = sum(s["cancelled"] for s in worker_stats().values())
    with client.stream("POST", "/tts", json={"text": LONG_TEXT, "mode": "sft", "speaker": SPEAKER, "seed": 9,
                                              "stream": True, "format": "pcm"}) as response:
        assert response.status_code == 200
        next(response.iter_raw())  # the first audio, then the client goes away
    deadline = time.monotonic() + 60
    cancelled = before
    while time.monotonic() < deadline and cancelled == before:
        time.sleep(0.5)
        cancelled = sum(s["cancelled"] for s in worker_stats().values())
    assert cancelled == before + 1


def test_saved_voice_is_used_by_both_replicas(client, cluster_root):
    from cosyvoice_ui.testing.signals import voice_clip

    clip = voice_clip(4.0, 16000)
    buffer = io.BytesIO()
    sf.write(buffer, clip.samples, clip.sample_rate, format="WAV")
    saved = client.post("/v1/voices", json={"name": "Shared Narrator", "transcript": "a test recording",
                                            "audio": base64.b64encode(buffer.getvalue()).decode()})
    assert saved.status_code == 201, saved.text
    voice_id = saved.json()["id"]
    features = list((cluster_root / "voices" / voice_id).glob("features-*"))
    assert features, "the replica that prepared the voice wrote its features to the shared folder"
    body = {"text": "Spoken in the saved voice.", "voice_id": voice_id, "mode": "zero_shot"}
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda seed: client.post("/tts", json={**body, "seed": 200 + seed}), range(8)))
    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers if a.status_code != 200]
    stats = worker_stats()
    assert len(stats) == 2
    for replica, s in stats.items():
        assert voice_id in s["voices"]["tiny-a"], (replica, s["voices"])


def test_replica_killed_mid_request(client):
    pids = {s["pid"] for s in worker_stats().values()}
    assert len(pids) == 2
    outcome: dict = {}

    def long_job() -> None:
        outcome["response"] = tts(client, text=LONG_TEXT, seed=31)

    job = threading.Thread(target=long_job)
    job.start()
    deadline = time.monotonic() + 30
    while client.get("/health").json()["queue"]["running"] < 1 and time.monotonic() < deadline:
        time.sleep(0.1)  # until the ingress has sent the job to a replica
    time.sleep(0.5)  # ... and that replica is synthesizing
    idle = {s["pid"] for s in worker_stats(expected=1, tries=1).values()}
    busy = pids - idle
    assert len(busy) == 1, (pids, idle)
    os.kill(busy.pop(), signal.SIGKILL)
    job.join(180)
    response = outcome["response"]
    print(f"\nkilled replica mid-request: HTTP {response.status_code}")
    if response.status_code == 200:  # retried on the other replica before any audio had been sent
        assert len(decoded(response)) > 0
    else:
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["code"] == "replica_lost" and "Traceback" not in error["message"]
        assert response.headers["Retry-After"] == "2"
    after = tts(client, seed=32)
    assert after.status_code == 200, after.text


def test_a_replica_refusal_arrives_as_our_own_error(cluster):
    """An error raised inside a replica reaches the ingress as the engine's error, not Ray's wrapper."""
    from ray import serve

    from cosyvoice_ui.cluster.client import ClusterEngine
    from cosyvoice_ui.cluster.config import APP_NAME, WORKER_NAME
    from cosyvoice_ui.errors import InvalidRequest
    from cosyvoice_ui.serving.backends import describe
    from cosyvoice_ui.types import Mode, SynthesisRequest

    handle = serve.get_deployment_handle(WORKER_NAME, APP_NAME)
    info = describe(str(cluster.settings.models_dir / "tiny-a"))
    engine = ClusterEngine(handle, "not-served", info, lambda: ())
    with pytest.raises(InvalidRequest) as raised:
        list(engine.synthesize(SynthesisRequest(mode=Mode.SFT, text="Hello.", speaker=SPEAKER, seed=1)))
    assert raised.value.code == "model_not_found" and "tiny-a" in str(raised.value)
    assert "Traceback" not in str(raised.value) and "ray" not in str(raised.value).lower()


def test_thin_client_talks_to_the_cluster(cluster):
    from cosyvoice_ui.serving.remote import RemoteEngine
    from cosyvoice_ui.types import Mode, SynthesisRequest

    engine = RemoteEngine(f"http://127.0.0.1:{PORT}", api_key=API_KEY)
    try:
        assert engine.info.name == "tiny-a"
        chunks = list(engine.synthesize(SynthesisRequest(mode=Mode.SFT, text="Through the thin client.",
                                                         speaker=SPEAKER, seed=4)))
        assert sum(len(c.samples) for c in chunks) > 0
    finally:
        engine.close()


def test_a_cpu_pool_serves_its_own_models(cluster, cluster_root, client):
    """The offline voice's layout beside GPU replicas: a model of its own CPU-only pool, routed by id."""
    from cosyvoice_ui.cluster import launch

    launch.deploy(cluster_config(cluster_root, replicas=1, cpu_models=("tiny-b",), cpu_replicas=1))
    pools = client.get("/health").json()["cluster"]["pools"]
    assert pools["CpuEngineWorker"]["models"] == ["tiny-b"] and pools["EngineWorker"]["models"] == ["tiny-a"]
    assert tts(client, seed=51, model="tiny-b").status_code == 200
    assert tts(client, seed=52).status_code == 200
    (cpu,) = worker_stats(expected=1, pool="CpuEngineWorker").values()
    (main,) = worker_stats(expected=1).values()
    assert cpu["loaded"] == ["tiny-b"] and cpu["served"] == 1
    assert main["loaded"] == ["tiny-a"] and main["served"] == 1


def test_scale_to_zero_and_back(cluster, cluster_root, client):
    from cosyvoice_ui.cluster import launch

    idle_s = 3.0
    config = cluster_config(cluster_root, idle_unload_s=idle_s, replicas=1)
    assert config.autoscaling()["min_replicas"] == 0
    assert config.autoscaling()["downscale_to_zero_delay_s"] == idle_s
    launch.deploy(config)
    assert tts(client, seed=41).status_code == 200
    idle_since = time.perf_counter()
    deadline = time.monotonic() + 90
    running = None
    while time.monotonic() < deadline:
        running = client.get("/health").json()["cluster"]["replicas"]["running"]
        if running == 0:
            break
        time.sleep(0.5)
    assert running == 0, "the idle deployment did not scale to zero"
    print(f"\nscaled to zero {time.perf_counter() - idle_since:.1f} s after the last job (delay {idle_s} s)")
    started = time.perf_counter()
    woke = tts(client, seed=42)
    cold = time.perf_counter() - started
    assert woke.status_code == 200, woke.text
    print(f"cold start from zero replicas: {cold:.1f} s to the first answer")
    assert client.get("/health").json()["cluster"]["replicas"]["running"] == 1


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
