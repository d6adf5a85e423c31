"""Soak the real web app: many concurrent clients on loopback, then check it did not leak.

    python benchmarks/soak.py                                  # tiny random SFT model, 32 clients x 50 requests
    python benchmarks/soak.py --offline                        # the offline default voice (Kokoro-82M)
    python benchmarks/soak.py --model-dir pretrained_models/CosyVoice-300M-SFT
    python benchmarks/soak.py --clients 4 --requests 5 --json  # what CI runs (tests/reliability/test_soak_short.py)

The app (`app.py`, i.e. web.server.serve: FastAPI + Gradio under uvicorn) runs in a child process on
127.0.0.1 and a free port, with private output, voice and temp folders (GRADIO_TEMP_DIR, TMPDIR), so its
RSS, open file descriptors, threads and files can be read from /proc and disk. Each client runs a fixed
rotation of KINDS: POST /tts, POST /v1/audio/speech (whole and streamed: the chunked body is read to its
end), saved-voice CRUD on /v1/voices (create with a generated wav, list, delete), and the Gradio queue
through gradio_client (`synthesize`, `list_voices`). Nothing leaves loopback; the run is bounded in
count (clients x requests) and in time (--max-seconds: then it stops and counts what was lost).

Reported: completed / failed (a 4xx/5xx, a wrong body or an exception) / lost (no answer before the
deadline: in flight, or never sent), p50/p95/p99 latency per kind and overall, the peak queue depth
(the model queue from /health, and Gradio's own queue from /gradio_api/queue/status), and RSS, fds,
threads and temp files before, after a warm-up (two rotations per client by default) and after the run,
with RSS and threads also sampled each second.

Bounds (the exit status is 1 when one is broken or a request failed or was lost). RSS and threads are bounded
over the second half of the run, from its middle sample to its end: RSS ≤ +max(RSS_BOUND_MB,
RSS_BOUND_FRACTION of the middle RSS), threads ≤ +THREAD_BOUND. A leak keeps climbing there; the first half is
still warm-up at 32 clients, because the worker pool grows with the queue's depth (to queue size + 9 threads,
each with its own allocator arena: 24 → 60 threads and 845 → 956 MB in the first half, then 956 → 950 MB).
From after the warm-up to after the run: fds ≤ +FD_BOUND, files in the app's temp and output folders ≤
+TEMP_FILE_BOUND + TEMP_FILES_PER_GRADIO_RESULT
per Gradio result (the file in --output-dir, kept as the history's unless --results-max-age-min says
otherwise, and Gradio's cached copy it serves by URL, swept after --temp-max-age-min), and the saved-voice
folder back to where it was.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script from any directory, without installing the package

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # gradio_client must not phone home

import httpx  # noqa: E402
import numpy as np  # noqa: E402

RSS_BOUND_MB = 64.0
RSS_BOUND_FRACTION = 0.10
FD_BOUND = 8
THREAD_BOUND = 16
TEMP_FILE_BOUND = 16
# A Gradio API result is written to --output-dir (as every UI result is) and Gradio serves its own copy
# from its cache; both are swept after --temp-max-age-min, far longer than a soak.
TEMP_FILES_PER_GRADIO_RESULT = 2
KINDS = ("tts", "speech", "speech_stream", "voice_create", "gradio_synthesize", "voice_list",
         "gradio_list_voices", "voice_delete")
GRADIO_RESULT_KINDS = ("gradio_synthesize",)
# The offline voice's matches of prompt recordings, a cache (capped) rather than saved voices.
MATCH_CACHE = Path("voices") / "offline" / "match_cache"
# Clients share this many recordings: matching a new one takes the offline voice ~15 s, and a cache keeps it.
RECORDINGS = 4
IDLE_WORKER_S = 12.0  # anyio ends a worker thread idle for 10 s
TEXT = "Soak request {n}."  # short: the queue is under test, not long decodes
TRANSCRIPT = "Hello, this is a short recording of my voice."


# --- the app under test -----------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class App:
    """The app's child process and the folders it writes to."""

    proc: subprocess.Popen
    url: str
    work: Path
    log_path: Path

    @property
    def temp_dirs(self) -> dict[str, Path]:
        return {name: self.work / name for name in ("gradio_tmp", "tmp", "outputs")}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_app(work: Path, model_dir: Path | None, clients: int, timeout_s: float = 180) -> App:
    """`app.py` on a free loopback port, in `work`, with every folder it writes inside `work`."""
    for name in ("gradio_tmp", "tmp", "outputs", "voices", "models"):
        (work / name).mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "COSYVOICE_API_KEYS"}
    env.update(GRADIO_TEMP_DIR=str(work / "gradio_tmp"), TMPDIR=str(work / "tmp"), GRADIO_ANALYTICS_ENABLED="False",
               HF_HUB_OFFLINE="1")
    model = ["--model-dir", str(model_dir)] if model_dir else []  # none (and no models): the offline default
    # --rate-limit 0: all clients share 127.0.0.1; the soak loads the queue, not the per-client limiter.
    # --queue-size: one job per client at most, so none is refused as "queue full" (admission is not soaked).
    cmd = [sys.executable, str(REPO / "app.py"), *model, "--host", "127.0.0.1", "--port", str(port),
           "--idle-unload", "0", "--rate-limit", "0", "--queue-size", str(max(32, clients)),
           "--output-dir", str(work / "outputs"), "--voices-dir", str(work / "voices"),
           "--models-dir", str(work / "models")]
    log_path = work / "app.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    app = App(proc, f"http://127.0.0.1:{port}", work, log_path)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(app.url + "/health", timeout=2).read()
            return app
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                app.stop()
                raise RuntimeError("the app did not start:\n" + log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.5)


def count_files(folder: Path) -> int:
    """Files under `folder`, without a store's one listing index (`.index.json`: written once, not per voice)."""
    return sum(len([f for f in files if f != ".index.json"]) for _, _, files in os.walk(folder))


def proc_status(pid: int) -> dict[str, str]:
    status = Path(f"/proc/{pid}/status").read_text()
    return dict(line.split(":", 1) for line in status.splitlines() if ":" in line)


def rss_mb_of(pid: int) -> float:
    return round(int(proc_status(pid)["VmRSS"].split()[0]) / 1024, 1)


def snapshot(app: App) -> dict:
    """The child's RSS (MB), open fds, threads, and the files in each of its folders."""
    fields = proc_status(app.proc.pid)
    files = {name: count_files(path) for name, path in app.temp_dirs.items()}
    return {"rss_mb": rss_mb_of(app.proc.pid),
            "fds": len(os.listdir(f"/proc/{app.proc.pid}/fd")), "threads": int(fields["Threads"]),
            "temp_files": sum(files.values()), "files": files,
            "voice_files": count_files(app.work / "voices") - count_files(app.work / MATCH_CACHE),
            "match_cache_files": count_files(app.work / MATCH_CACHE)}


# --- clients ----------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    kind: str
    ok: bool
    latency_s: float
    error: str = ""


@dataclass
class Tally:
    """Every outcome, and the requests still in flight (thread-safe)."""

    outcomes: list[Outcome] = field(default_factory=list)
    in_flight: int = 0
    cut_off: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self) -> None:
        with self.lock:
            self.in_flight += 1

    def cut(self) -> None:
        with self.lock:
            self.in_flight -= 1
            self.cut_off += 1

    def end(self, outcome: Outcome) -> None:
        with self.lock:
            self.in_flight -= 1
            self.outcomes.append(outcome)


class Failure(Exception):
    """A response that is not what a successful request returns."""


def wav_bytes(seed: int) -> bytes:
    import soundfile as sf

    from cosyvoice_ui.testing.signals import voice_clip

    clip = voice_clip(4.0, 16000, pitch=120 + seed % 60, seed=seed)
    out = io.BytesIO()
    sf.write(out, clip.samples, clip.sample_rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


class Client:
    """One simulated user: its own HTTP connection pool, Gradio client and saved voices."""

    def __init__(self, index: int, app_url: str, voice: str, downloads: Path, deadline: float, tally: Tally) -> None:
        self.index = index
        self.url = app_url
        self.voice = voice
        self.deadline = deadline
        self.tally = tally
        self.http = httpx.Client(base_url=app_url, timeout=self._remaining())
        self.downloads = downloads / f"client{index}"
        self.downloads.mkdir(parents=True, exist_ok=True)
        self._gradio = None
        self.saved: list[str] = []
        self.counter = itertools.count()
        self.wav = base64.b64encode(wav_bytes(index % RECORDINGS)).decode()

    def _remaining(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    @property
    def gradio(self):
        if self._gradio is None:
            from gradio_client import Client as GradioClient

            self._gradio = GradioClient(self.url + "/", verbose=False, download_files=str(self.downloads),
                                        analytics_enabled=False)
        return self._gradio

    def close(self) -> None:
        self.http.close()
        if self._gradio is not None:
            self._gradio.close()

    def run(self, kind: str) -> str:
        """One request of `kind`, timed and tallied: "done", "cut" (no answer before the deadline: lost) or
        "late" (the deadline had passed: not sent)."""
        if time.monotonic() >= self.deadline:
            return "late"
        if kind == "voice_delete" and not self.saved:  # a client whose rotation starts past voice_create
            state = self.run("voice_create")
            if state != "done":
                return state
        self.tally.begin()
        started = time.perf_counter()
        try:
            getattr(self, "do_" + kind)(next(self.counter))
            outcome = Outcome(kind, True, time.perf_counter() - started)
        except Exception as exc:  # every failure is a finding: record it and go on
            if time.monotonic() >= self.deadline:  # cut off by the deadline: no answer, so lost, not failed
                self.tally.cut()
                return "cut"
            outcome = Outcome(kind, False, time.perf_counter() - started, f"{type(exc).__name__}: {exc}"[:300])
        self.tally.end(outcome)
        return "done"

    def _post(self, path: str, body: dict) -> httpx.Response:
        response = self.http.post(path, json=body, timeout=self._remaining())
        _expect(response, 200, 201)
        return response

    def do_tts(self, n: int) -> None:
        result = self._post("/tts", {"text": TEXT.format(n=n), "speaker": self.voice}).json()
        if len(base64.b64decode(result["audio"])) <= 44 or result["duration_s"] <= 0:
            raise Failure("/tts returned no audio")

    def do_speech(self, n: int) -> None:
        data = self._post("/v1/audio/speech", {"model": "tts-1", "input": TEXT.format(n=n), "voice": self.voice,
                                               "response_format": "wav"}).content
        if not data.startswith(b"RIFF") or len(data) <= 44:
            raise Failure("/v1/audio/speech returned no wav")

    def do_speech_stream(self, n: int) -> None:
        body = {"model": "tts-1", "input": TEXT.format(n=n), "voice": self.voice, "response_format": "wav",
                "stream_format": "audio"}
        size, head = 0, b""
        with self.http.stream("POST", "/v1/audio/speech", json=body, timeout=self._remaining()) as response:
            if response.status_code != 200:
                response.read()
                _expect(response, 200)
            for piece in response.iter_bytes():  # to the end of the chunked body
                head = head or piece[:4]
                size += len(piece)
        if head != b"RIFF" or size <= 44:
            raise Failure(f"the streamed body has {size} bytes, not a wav")

    def do_voice_create(self, n: int) -> None:
        record = self._post("/v1/voices", {"name": f"soak {self.index} {n}", "audio": self.wav,
                                           "transcript": TRANSCRIPT}).json()
        self.saved.append(record["id"])

    def do_voice_list(self, n: int) -> None:
        response = self.http.get("/v1/voices", timeout=self._remaining())
        _expect(response, 200)
        ids = {v["id"] for v in response.json()["data"]}
        if not set(self.saved) <= ids:
            raise Failure(f"saved voices missing from the list: {sorted(set(self.saved) - ids)}")

    def do_voice_delete(self, n: int) -> None:
        if not self.saved:
            raise Failure("no saved voice to delete: the create before it failed")
        response = self.http.delete(f"/v1/voices/{self.saved[-1]}", timeout=self._remaining())
        _expect(response, 200)
        self.saved.pop()

    def do_gradio_synthesize(self, n: int) -> None:
        job = self.gradio.submit(text=TEXT.format(n=n), voice=self.voice, api_name="/synthesize")
        result = job.result(timeout=self._remaining())
        path = Path(result if isinstance(result, str) else result["path"])
        try:
            if path.stat().st_size <= 44:
                raise Failure("the Gradio result file is empty")
        finally:
            path.unlink(missing_ok=True)  # the client's copy; the server's is what is counted

    def do_gradio_list_voices(self, n: int) -> None:
        listed = json.loads(self.gradio.predict(api_name="/list_voices"))
        if self.voice not in listed["presets"] and listed.get("default_voice") != self.voice:
            raise Failure(f"list_voices does not offer {self.voice!r}")


def _expect(response: httpx.Response, *statuses: int) -> None:
    if response.status_code not in statuses:
        raise Failure(f"HTTP {response.status_code}: {response.text[:200]}")


def client_loop(client: Client, kinds: list[str], not_sent: list[int], index: int) -> None:
    sent = 0
    for kind in kinds:
        not_sent[index] = len(kinds) - sent - 1  # if this one hangs, it is the one in flight
        state = client.run(kind)
        if state == "late":
            break
        sent += 1
        if state == "cut":
            break
    not_sent[index] = len(kinds) - sent
    while client.saved and client.run("voice_delete") == "done":  # leave the voice folder as it was
        pass


# --- the run ----------------------------------------------------------------------------------------------

def rotation(client_index: int, count: int) -> list[str]:
    """`count` kinds in KINDS order, each client starting elsewhere so every kind runs at once."""
    start = client_index % len(KINDS)
    return [KINDS[(start + i) % len(KINDS)] for i in range(count)]


def run_phase(app_url: str, voice: str, clients: int, requests: int, deadline: float, downloads: Path,
              poll: dict) -> dict:
    """`clients` threads x `requests` each; returns the tally and what was not sent."""
    tally = Tally()
    not_sent = [requests] * clients
    workers = [Client(i, app_url, voice, downloads, deadline, tally) for i in range(clients)]
    threads = [threading.Thread(target=client_loop, args=(w, rotation(i, requests), not_sent, i), daemon=True,
                                name=f"soak-client-{i}") for i, w in enumerate(workers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 10)
    elapsed = time.perf_counter() - started
    for w in workers:
        w.close()
    with tally.lock:
        return {"outcomes": list(tally.outcomes), "in_flight": tally.in_flight + tally.cut_off,
                "not_sent": sum(not_sent),
                "elapsed_s": elapsed, "hung_clients": sum(t.is_alive() for t in threads), **poll}


def poll_queue(app_url: str, pid: int, stop: threading.Event, peak: dict) -> None:
    """Peak jobs waiting / running in the model queue (from /health, what monitors see), peak events
    waiting in Gradio's own queue in front of it (its synthesis events run one at a time), and the
    child's RSS once a second (a leak climbs steadily; a warm process levels off)."""
    trace: list[tuple[float, float, int]] = peak.setdefault("rss_trace", [])
    started = time.monotonic()
    with httpx.Client(timeout=5) as http:
        while not stop.wait(0.2):
            now = time.monotonic() - started
            if not trace or now - trace[-1][0] >= 1.0:
                with contextlib.suppress(OSError, KeyError, ValueError):
                    trace.append((round(now, 1), rss_mb_of(pid), int(proc_status(pid)["Threads"])))
            try:
                queue = http.get(app_url + "/health").json()["queue"]
                gradio = http.get(app_url + "/gradio_api/queue/status").json()["queue_size"]
            except (httpx.HTTPError, ValueError, KeyError):
                peak["poll_errors"] = peak.get("poll_errors", 0) + 1
                continue
            peak["peak_queued"] = max(peak.get("peak_queued", 0), queue["queued"])
            peak["peak_running"] = max(peak.get("peak_running", 0), queue["running"])
            peak["peak_depth"] = max(peak.get("peak_depth", 0), queue["queued"] + queue["running"])
            peak["peak_gradio_queue"] = max(peak.get("peak_gradio_queue", 0), gradio)


def percentiles(latencies: list[float]) -> dict:
    if not latencies:
        return {"n": 0, "p50_s": None, "p95_s": None, "p99_s": None}
    p50, p95, p99 = np.percentile(np.asarray(latencies), [50, 95, 99])
    return {"n": len(latencies), "p50_s": round(float(p50), 3), "p95_s": round(float(p95), 3),
            "p99_s": round(float(p99), 3)}


def rss_trend(trace: list[tuple[float, float, int]]) -> dict:
    """RSS and threads at the start, middle and end of the run, and the peaks: a leak grows in both halves."""
    if not trace:
        return {}
    values, threads = [rss for _, rss, _ in trace], [n for _, _, n in trace]
    middle = len(values) // 2
    return {"start_mb": values[0], "middle_mb": values[middle], "end_mb": values[-1], "peak_mb": max(values),
            "threads_start": threads[0], "threads_middle": threads[middle], "threads_end": threads[-1],
            "threads_peak": max(threads), "samples": len(values)}


def summarise(phase: dict, planned: int) -> dict:
    outcomes = phase["outcomes"]
    good = [o for o in outcomes if o.ok]
    bad = [o for o in outcomes if not o.ok]
    lost = phase["in_flight"] + phase["not_sent"]
    return {  # requests: what was planned plus the clean-up deletes of voices a client still held
        "planned": planned, "requests": len(outcomes) + lost, "completed": len(good), "failed": len(bad),
        "lost": lost, "lost_in_flight": phase["in_flight"], "lost_not_sent": phase["not_sent"],
        "elapsed_s": round(phase["elapsed_s"], 1), "throughput_per_s": round(len(good) / phase["elapsed_s"], 2)
        if phase["elapsed_s"] else 0.0,
        "latency": {kind: percentiles([o.latency_s for o in good if o.kind == kind]) for kind in KINDS},
        "overall": percentiles([o.latency_s for o in good]),
        "kinds_completed": sorted({o.kind for o in good}),
        "failures": sorted({f"{o.kind}: {o.error}" for o in bad})[:20],
        "rss_trend": rss_trend(phase.get("rss_trace", [])),
        "peak_queue": {k: phase.get(k, 0) for k in ("peak_queued", "peak_running", "peak_depth", "peak_gradio_queue",
                                                      "poll_errors")},
    }


def check_bounds(warm: dict, after: dict, before: dict, gradio_results: int,
                 trend: dict | None = None) -> tuple[dict, list[str]]:
    """The growth bounds, and a sentence for each one broken. RSS and threads: over the second half of the run
    (`trend`, from the samples; without samples, from after the warm-up); the rest from after the warm-up."""
    if trend:
        rss_from, rss_to = trend["middle_mb"], trend["end_mb"]
        threads_from, threads_to = trend["threads_middle"], trend["threads_end"]
    else:
        rss_from, rss_to, threads_from, threads_to = warm["rss_mb"], after["rss_mb"], warm["threads"], after["threads"]
    rss_limit = max(RSS_BOUND_MB, RSS_BOUND_FRACTION * rss_from)
    temp_limit = TEMP_FILE_BOUND + TEMP_FILES_PER_GRADIO_RESULT * gradio_results
    bounds = {"rss_mb": round(rss_limit, 1), "fds": FD_BOUND, "threads": THREAD_BOUND, "temp_files": temp_limit,
              "voice_files": 0}
    growth = {"rss_mb": round(rss_to - rss_from, 1), "fds": after["fds"] - warm["fds"],
              "threads": threads_to - threads_from, "temp_files": after["temp_files"] - warm["temp_files"],
              "voice_files": after["voice_files"] - before["voice_files"]}
    def since(name: str) -> str:
        return "in the second half of the run" if trend and name in ("rss_mb", "threads") else "after the warm-up"

    broken = [f"{name} grew by {growth[name]} {since(name)} (bound: {limit})"
              for name, limit in bounds.items() if growth[name] > limit]
    return {"limits": bounds, "growth": growth,
            "after_warmup": {"rss_mb": round(after["rss_mb"] - warm["rss_mb"], 1),
                             "threads": after["threads"] - warm["threads"]}}, broken


def soak(args: argparse.Namespace, work: Path) -> dict:
    model_dir = None
    if not args.offline:
        model_dir = args.model_dir
        if model_dir is None:
            from cosyvoice_ui.testing.tiny_model import write_tiny_model

            model_dir = write_tiny_model(work / "tiny-sft", sft=True)
    app = start_app(work / "app", model_dir, args.clients)
    try:
        info = httpx.get(app.url + "/v1/models", timeout=30).json()["data"][0]
        default = info.get("default_voice") or {}
        voice = args.voice or default.get("id") or (info["speakers"][0] if info["speakers"] else "")
        before = snapshot(app)
        downloads = work / "downloads"
        t0 = time.monotonic()
        warm_phase = run_phase(app.url, voice, args.clients, len(KINDS) * args.warmup_cycles,
                               t0 + args.max_seconds, downloads, {})
        settle(app.url, args.settle_seconds)
        warm = snapshot(app)
        peak: dict = {}
        stop = threading.Event()
        poller = threading.Thread(target=poll_queue, args=(app.url, app.proc.pid, stop, peak), daemon=True)
        poller.start()
        main = run_phase(app.url, voice, args.clients, args.requests, t0 + args.max_seconds, downloads, peak)
        stop.set()
        poller.join(5)
        settle(app.url, args.settle_seconds)
        after = snapshot(app)
        alive = app.proc.poll() is None
    finally:
        app.stop()
    summary = summarise(main, args.clients * args.requests)
    warm_summary = summarise(warm_phase, args.clients * len(KINDS) * args.warmup_cycles)
    gradio_results = sum(1 for o in main["outcomes"] if o.kind in GRADIO_RESULT_KINDS)
    growth, broken = check_bounds(warm, after, before, gradio_results, summary["rss_trend"])
    problems = list(broken)
    for name, part in (("warm-up", warm_summary), ("run", summary)):
        if part["failed"]:
            problems.append(f"{part['failed']} requests failed in the {name}: " + "; ".join(part["failures"][:5]))
        if part["lost"]:
            problems.append(f"{part['lost']} requests were lost in the {name} ({part['lost_in_flight']} in flight, "
                            f"{part['lost_not_sent']} never sent before --max-seconds {args.max_seconds:g})")
    missing = sorted(set(KINDS) - set(summary["kinds_completed"]))
    if missing:
        problems.append(f"kinds never completed: {', '.join(missing)}")
    if main["hung_clients"]:
        problems.append(f"{main['hung_clients']} clients still waited for an answer 10 s after the deadline")
    if not alive:
        problems.append("the app exited during the run")
    return {"model": info["name"], "family": info["family"], "voice": voice, "clients": args.clients,
            "requests_per_client": args.requests, "max_seconds": args.max_seconds, **summary,
            "warmup": {k: warm_summary[k] for k in ("planned", "completed", "failed", "lost", "failures")},
            "resources": {"before": before, "warm": warm, "after": after}, "bounds": growth,
            "problems": problems, "ok": not problems}


def settle(app_url: str, idle_s: float = IDLE_WORKER_S, timeout_s: float = 30) -> None:
    """Wait until the queue is empty (a cut-off job may still be running), then until idle worker threads have
    exited, so the thread count (and their memory) is what the app keeps, not what the last burst needed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            queue = httpx.get(app_url + "/health", timeout=5).json()["queue"]
            if queue["queued"] + queue["running"] == 0:
                break
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    time.sleep(idle_s)


# --- report -----------------------------------------------------------------------------------------------

def format_report(r: dict) -> str:
    def ms(v):
        return "-" if v is None else f"{v * 1000:.0f}"

    lines = [f"soak: {r['model']} ({r['family']}), voice {r['voice']!r}, {r['clients']} clients x "
             f"{r['requests_per_client']} requests, limit {r['max_seconds']:g} s",
             f"requests {r['requests']}: completed {r['completed']}, failed {r['failed']}, lost {r['lost']} "
             f"({r['lost_in_flight']} in flight, {r['lost_not_sent']} never sent) in {r['elapsed_s']} s, "
             f"{r['throughput_per_s']} /s",
             f"peak queue depth {r['peak_queue']['peak_depth']} ({r['peak_queue']['peak_queued']} waiting, "
             f"{r['peak_queue']['peak_running']} running); Gradio's queue in front of it: "
             f"{r['peak_queue']['peak_gradio_queue']}", "",
             f"{'kind':<20}{'n':>6}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}"]
    for kind, p in [*r["latency"].items(), ("overall", r["overall"])]:
        lines.append(f"{kind:<20}{p['n']:>6}{ms(p['p50_s']):>10}{ms(p['p95_s']):>10}{ms(p['p99_s']):>10}")
    res = r["resources"]
    lines += ["", f"{'':<18}{'before':>10}{'warm':>10}{'after':>10}{'growth':>10}{'bound':>10}"]
    for name in ("rss_mb", "fds", "threads", "temp_files", "voice_files", "match_cache_files"):
        growth, limit = r["bounds"]["growth"].get(name, "-"), r["bounds"]["limits"].get(name, "-")
        lines.append(f"{name:<18}{res['before'][name]:>10}{res['warm'][name]:>10}{res['after'][name]:>10}"
                     f"{growth:>10}{limit:>10}")
    lines.append(f"temp files by folder after the run: {res['after']['files']}")
    trend = r.get("rss_trend") or {}
    if trend:
        lines.append(f"RSS during the run: {trend['start_mb']} MB at the start, {trend['middle_mb']} halfway, "
                     f"{trend['end_mb']} at the end (peak {trend['peak_mb']})")
    lines += ["", "OK: within every bound" if r["ok"] else "FAILED:"] + [f"  - {p}" for p in r["problems"]]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = p.add_mutually_exclusive_group()
    which.add_argument("--offline", action="store_true", help="the offline default voice instead of the tiny model")
    which.add_argument("--model-dir", type=Path, help="a CosyVoice model folder instead of the tiny model")
    p.add_argument("--clients", type=int, default=32, help="concurrent clients")
    p.add_argument("--requests", type=int, default=50, help="requests per client (after the warm-up)")
    p.add_argument("--warmup-cycles", type=int, default=2, help="rotations of every kind per client first")
    p.add_argument("--max-seconds", type=float, default=1800.0, help="stop here and count the rest as lost")
    p.add_argument("--settle-seconds", type=float, default=IDLE_WORKER_S,
                   help="wait this long after each phase before measuring (idle worker threads exit)")
    p.add_argument("--voice", help="voice every request uses (default: the app's default voice, else the first preset)")
    p.add_argument("--work-dir", type=Path, help="keep the app's folders and log here (default: a temp dir)")
    p.add_argument("--json", action="store_true", help="print one JSON object (last line)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import signal

    # SIGTERM (a CI timeout, kill) unwinds like Ctrl-C, so the app's child process is stopped, not orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.clients < 1 or args.requests < 1:
        raise SystemExit("--clients and --requests must be at least 1")
    if args.work_dir:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        result = soak(args, args.work_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="cosyvoice-soak-") as scratch:
            result = soak(args, Path(scratch))
    print(json.dumps(result) if args.json else format_report(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
