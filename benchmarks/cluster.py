"""Cluster overhead and scaling on a tiny model: throughput and p50/p95 latency at concurrency 1/2/4/8 for the
single-process app, one Ray Serve replica and two, plus mixed-model bursts (how many model loads they cost).

    python benchmarks/cluster.py [--requests 16] [--json out.json]

Runs on loopback only: as root it re-runs itself inside a fresh network namespace where `lo` is the one
interface (`unshare -n`), since Ray binds its services to the machine's external address otherwise. The tiny
model's synthesis is short on purpose: what is left is the serving path's own cost per request. Every figure
is measured in the same run; compare them with each other, not with other machines.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

API_KEY = "bench-key"
SPEAKER = "英文女"
TEXT = "A short sentence for the serving benchmark."
LEVELS = (1, 2, 4, 8)


def loopback_only() -> bool:
    return sorted(name for _, name in socket.if_nameindex()) == ["lo"]


def reexec_in_namespace() -> int:
    inner = f"ip link set lo up && exec {sys.executable} {Path(__file__).resolve()} {' '.join(sys.argv[1:])}"
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    return subprocess.run(["unshare", "-n", "bash", "-c", inner], env=env).returncode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(url: str, concurrency: int, requests: int, models=("tiny-a",), seed0: int = 0) -> dict:
    """`requests` distinct /tts requests (fresh seeds: no cache hits), `concurrency` at a time."""
    import httpx

    latencies: list[float] = []
    failures = 0
    lock = threading.Lock()
    client = httpx.Client(base_url=url, timeout=300, headers={"Authorization": f"Bearer {API_KEY}"})

    def one(i: int) -> None:
        nonlocal failures
        started = time.perf_counter()
        body = {"text": TEXT, "mode": "sft", "speaker": SPEAKER, "seed": seed0 + i, "format": "pcm",
                "model": models[i % len(models)]}
        response = client.post("/tts", json=body)
        with lock:
            if response.status_code == 200:
                latencies.append(time.perf_counter() - started)
            else:
                failures += 1

    began = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(requests)))
    wall = time.perf_counter() - began
    client.close()
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))] if ordered else float("nan")
    return {"concurrency": concurrency, "requests": requests, "failed": failures, "throughput_rps": len(latencies) / wall,
            "p50_ms": statistics.median(ordered) * 1000 if ordered else float("nan"), "p95_ms": p95 * 1000}


def sweep(label: str, url: str, requests: int, seed0: int) -> list[dict]:
    load(url, 2, 4, seed0=seed0 + 90_000)  # warm: model loaded, voices registered, code paths run once
    rows = []
    for level in LEVELS:
        row = {"setup": label, **load(url, level, max(requests, 2 * level), seed0=seed0 + 1000 * level)}
        rows.append(row)
        print(f"{label:>16}  c={level}  {row['throughput_rps']:6.2f} req/s  p50 {row['p50_ms']:7.1f} ms  "
              f"p95 {row['p95_ms']:7.1f} ms  failed {row['failed']}", flush=True)
    return rows


def single_process(root: Path, requests: int) -> list[dict]:
    import uvicorn

    from cosyvoice_ui.settings import Settings
    from cosyvoice_ui.web.server import create_app, create_manager

    settings = Settings(model_dir=root / "models" / "tiny-a", models_dir=root / "models", voices_dir=root / "voices1",
                        glossary_dir=root / "g1", projects_dir=root / "p1", idle_unload_s=0, api_keys=(API_KEY,),
                        take_retries=0, threads=1, rate_limit_per_min=0, extra={"output_dir": str(root / "out")})
    from cosyvoice_ui.serving.memory import set_compute_threads

    set_compute_threads(settings.threads)  # as `serve` does, and as each replica does: one torch thread
    manager = create_manager(settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, manager), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.1)
    try:
        return sweep("single process", f"http://127.0.0.1:{port}", requests, 0)
    finally:
        server.should_exit = True
        thread.join(10)
        manager.shutdown(0)


def cluster_config(root: Path, port: int, **changes):
    from cosyvoice_ui.cluster.config import ClusterConfig
    from cosyvoice_ui.settings import Settings

    settings = Settings(models_dir=root / "models", voices_dir=root / "voices", glossary_dir=root / "g",
                        projects_dir=root / "p", idle_unload_s=0, api_keys=(API_KEY,), take_retries=0, threads=1,
                        rate_limit_per_min=0)
    return ClusterConfig(settings=settings, **{"models": ("tiny-a", "tiny-b"), "replicas": 1, "min_replicas": 1,
                                               "replica_cpus": 0.25, "ingress_cpus": 0.1, "port": port, **changes})


def replica_loads() -> int:
    from ray import serve

    from cosyvoice_ui.cluster.config import APP_NAME, WORKER_NAME  # the one pool here

    handle = serve.get_deployment_handle(WORKER_NAME, APP_NAME)
    seen = {}
    for _ in range(40):
        stats = handle.stats.remote().result(timeout_s=60)
        seen[stats["replica"]] = stats["loads"]
    return sum(seen.values())


def cluster_runs(root: Path, requests: int) -> tuple[list[dict], list[dict]]:
    from cosyvoice_ui.cluster import launch

    port = free_port()
    started = time.perf_counter()
    launch.start_ray(None, cluster_config(root, port, replicas=2))
    rows, bursts = [], []
    try:
        for replicas in (1, 2):
            launch.deploy(cluster_config(root, port, replicas=replicas, min_replicas=replicas))
            if replicas == 1:
                print(f"cluster up (head + 1 replica) in {time.perf_counter() - started:.1f} s", flush=True)
            rows += sweep(f"ray, {replicas} replica{'s' if replicas > 1 else ''}", f"http://127.0.0.1:{port}",
                          requests, 10_000 * replicas)
        for held in (1, 2):
            launch.deploy(cluster_config(root, port, replicas=2, min_replicas=2, models_per_replica=held))
            load(f"http://127.0.0.1:{port}", 2, 4, models=("tiny-a",), seed0=70_000 + held)
            before = replica_loads()
            burst = load(f"http://127.0.0.1:{port}", 8, 2 * requests, models=("tiny-a", "tiny-b"),
                         seed0=80_000 + 1000 * held)
            reloads = replica_loads() - before
            bursts.append({"models_per_replica": held, "requests": burst["requests"], "loads": reloads,
                           "failed": burst["failed"], "throughput_rps": burst["throughput_rps"],
                           "p95_ms": burst["p95_ms"]})
            print(f"mixed burst, {held} model(s) per replica: {reloads} model loads in {burst['requests']} requests "
                  f"(2 replicas, 2 models), {burst['throughput_rps']:.2f} req/s, p95 {burst['p95_ms']:.0f} ms",
                  flush=True)
    finally:
        launch.stop()
    return rows, bursts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=16, help="requests per concurrency level (at least 2 x it)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if not loopback_only():
        if os.geteuid() != 0:
            print("error: run as root (it needs a network namespace with only loopback: unshare -n)", file=sys.stderr)
            return 2
        return reexec_in_namespace()
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        os.environ.pop(name, None)
    from cosyvoice_ui.testing.tiny_model import write_tiny_model

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        write_tiny_model(root / "models" / "tiny-a", sft=True, seed=0)
        write_tiny_model(root / "models" / "tiny-b", sft=True, seed=1)
        rows = single_process(root, args.requests)
        cluster_rows, bursts = cluster_runs(root, args.requests)
    rows += cluster_rows
    base = {r["concurrency"]: r for r in rows if r["setup"] == "single process"}
    one = {r["concurrency"]: r for r in rows if r["setup"] == "ray, 1 replica"}
    two = {r["concurrency"]: r for r in rows if r["setup"] == "ray, 2 replicas"}
    print("\nratios in this run:")
    print(f"  overhead per request at c=1 (p50, 1 replica vs single process): "
          f"{one[1]['p50_ms'] - base[1]['p50_ms']:+.1f} ms ({one[1]['p50_ms'] / base[1]['p50_ms']:.2f}x)")
    for level in LEVELS:
        print(f"  c={level}: 2 replicas / 1 replica throughput {two[level]['throughput_rps'] / one[level]['throughput_rps']:.2f}x"
              f", 1 replica / single process {one[level]['throughput_rps'] / base[level]['throughput_rps']:.2f}x")
    print(f"  cores here: {os.cpu_count()} (replicas share them: two replicas cannot double a 2-core machine)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "bursts": bursts, "cpus": os.cpu_count()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
