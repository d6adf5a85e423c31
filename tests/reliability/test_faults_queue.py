"""Faults around the job queue (issue 13, fault tests): idle unload while jobs wait, Stop pressed mid-stream
in the UI, switching models while a job runs, and a shutdown that finishes running jobs and refuses the rest.

Every test runs on `FakeEngine`s whose chunks wait on `release`, so a job is held exactly as long as the test
needs; the waits below only bound how long a broken build may hang, they are never asserted on.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_ui.api.routes import add_routes
from cosyvoice_ui.errors import Cancelled
from cosyvoice_ui.serving.manager import ModelManager, ShuttingDown
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import Mode, SynthesisRequest
from tests.web_client import LOOPBACK

WAIT_S = 10.0  # the longest any step may take before the test gives up (a hang, not a slow run)


def wait_until(condition, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for: {what}")
        time.sleep(0.02)


def fake_manager(idle_s: float = 0.0, **engine_options) -> tuple[ModelManager, list[FakeEngine]]:
    """A manager whose loader makes one FakeEngine per load, named after the model id."""
    made: list[FakeEngine] = []

    def loader(model_id, options, progress):
        engine = FakeEngine(name=model_id, **engine_options)
        made.append(engine)
        return engine

    return ModelManager("old", loader=loader, idle_unload_s=idle_s), made


def request(seed: int = 1, stream: bool = True) -> SynthesisRequest:
    return SynthesisRequest(Mode.SFT, text="one two three four", speaker="A", seed=seed, stream=stream)


class Job(threading.Thread):
    """One job in a thread: records the engine it ran on, its samples, whether the engine was closed under
    it, and the error it ended with."""

    def __init__(self, manager: ModelManager, seed: int = 1, cancel: threading.Event | None = None) -> None:
        super().__init__(daemon=True)
        self.manager, self.seed, self.cancel = manager, seed, cancel
        self.engine: FakeEngine | None = None
        self.samples: list[np.ndarray] = []
        self.closed_under_it = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.manager.job(cancel=self.cancel) as engine:
                self.engine = engine
                for chunk in engine.synthesize(request(self.seed), cancel=self.cancel):
                    self.closed_under_it |= engine.closed
                    self.samples.append(chunk.samples)
                self.closed_under_it |= engine.closed
        except BaseException as exc:  # recorded for the test to assert on
            self.error = exc


def reference(seed: int = 1, **engine_options) -> np.ndarray:
    """What an undisturbed job of `seed` produces on a fresh engine."""
    engine = FakeEngine(**engine_options)
    return np.concatenate([c.samples for c in engine.synthesize(request(seed))])


# --- idle unload while jobs are queued --------------------------------------------------------------


def test_idle_unload_waits_for_every_queued_job_then_fires() -> None:
    manager, made = fake_manager(idle_s=0.2, chunks=3, chunk_samples=800)
    manager.engine()
    made[0].release.clear()  # the running job stalls; the others queue behind it
    jobs = [Job(manager, seed) for seed in range(4)]
    for job in jobs:
        job.start()
        time.sleep(0.02)  # start order = ticket order (FIFO)
    wait_until(lambda: manager.status().running == 1 and manager.status().queued == 3, "1 running, 3 queued")
    time.sleep(1.0)  # five idle periods pass: the watcher runs, finds jobs held, and must not unload
    assert manager.state == "loaded" and not made[0].closed, "the model was unloaded under waiting jobs"
    made[0].release.set()
    for job in jobs:
        job.join(WAIT_S)
    for seed, job in enumerate(jobs):
        assert job.error is None, f"queued job {seed} failed: {job.error!r}"
        assert job.engine is made[0] and not job.closed_under_it, "a queued job ran on a closed or reloaded model"
        assert np.array_equal(np.concatenate(job.samples), reference(seed, chunks=3, chunk_samples=800))
    assert len(made) == 1, "the model was reloaded in the middle of the queue"
    wait_until(lambda: manager.state == "unloaded", "idle unload after the queue drained")
    assert made[0].closed
    manager.shutdown()


def test_idle_unload_never_fires_while_a_queued_job_loads_the_model() -> None:
    """The first job of an unloaded manager loads the model; idle unload must not release it under that job."""
    loading = threading.Event()
    proceed = threading.Event()
    made: list[FakeEngine] = []

    def slow_loader(model_id, options, progress):
        loading.set()
        proceed.wait(WAIT_S)
        made.append(FakeEngine(chunks=2, chunk_samples=400))
        return made[-1]

    manager = ModelManager("slow", loader=slow_loader, idle_unload_s=0.2)
    job = Job(manager)
    job.start()
    assert loading.wait(WAIT_S)
    time.sleep(0.6)  # idle periods pass while the model loads
    proceed.set()
    job.join(WAIT_S)
    assert job.error is None and not job.closed_under_it and job.samples
    wait_until(lambda: manager.state == "unloaded", "idle unload after the job")
    manager.shutdown()


# --- switching models while a job runs ---------------------------------------------------------------


def test_switching_models_lets_the_running_job_finish_on_the_old_one() -> None:
    manager, made = fake_manager(chunks=4, chunk_samples=800)
    manager.engine()
    old = made[0]
    old.release.clear()
    running, queued = Job(manager, seed=3), Job(manager, seed=4)
    running.start()
    assert old.started.wait(WAIT_S)
    queued.start()
    wait_until(lambda: manager.status().queued == 1, "the second job queued")
    switch = threading.Thread(target=manager.select, args=("new",), daemon=True)
    switch.start()
    switch.join(0.5)
    assert switch.is_alive(), "select() returned while a job still ran on the old model"
    assert manager.model_id == "old" and not old.closed
    old.release.set()
    for thread in (running, queued, switch):
        thread.join(WAIT_S)
    for job, seed in ((running, 3), (queued, 4)):
        assert job.error is None and job.engine is old and not job.closed_under_it
        assert np.array_equal(np.concatenate(job.samples), reference(seed, chunks=4, chunk_samples=800)), \
            "a job's audio is not wholly the old model's"
    assert manager.model_id == "new" and old.closed
    after = Job(manager, seed=5)
    after.start()
    after.join(WAIT_S)
    assert after.error is None and after.engine is made[1] and after.engine.info.name == "new"


# --- Stop pressed mid-stream (the UI's handlers) --------------------------------------------------------


class Browser:
    """What the handlers read from a gr.Request: the session and its language."""

    def __init__(self, session: str) -> None:
        self.session_hash = session
        self.headers = {"accept-language": "en-US"}


@pytest.fixture()
def ui(tmp_path: Path):
    from cosyvoice_ui.ui.handlers import Handlers

    manager, made = fake_manager(chunks=50, chunk_samples=1600)
    manager.engine()
    return Handlers(manager, Settings(voices_dir=tmp_path / "voices"), tmp_path / "outputs"), manager, made[0]


def ui_run(handlers, session: str, seed: int = 1):
    from cosyvoice_ui.ui.handlers import OutputOptions
    from cosyvoice_ui.ui.requests import request_from_meta, sft_meta

    meta = sft_meta("A", "one two three four five six")
    return handlers.run(request_from_meta(meta, seed=seed, stream=True), OutputOptions(), [], Browser(session),
                        None, meta)


def test_stop_mid_stream_cancels_the_engine_and_the_next_job_runs(ui) -> None:
    from cosyvoice_ui.ui import strings

    handlers, manager, engine = ui
    outputs = handlers.output_dir
    run = ui_run(handlers, "alice")
    next(run)  # the first chunk is on its way to the browser
    assert manager.status().running == 1
    handlers.stop(Browser("alice"))
    *_, last = list(run)  # Stop is a state: the run ends saying so, with no gr.Error
    assert last[2] == strings.label("stopped", "en")
    assert engine.cancelled.is_set() and not engine.finished.is_set(), "the engine ran on after Stop"
    assert not manager.busy, "the stopped job still holds its slot"
    assert not list(outputs.iterdir()), "a stopped job left a result file"
    final = list(ui_run(handlers, "alice", seed=2))[-1]
    assert Path(final[1]).is_file() and final[3], "the next job did not run to a saved result"


def test_stop_while_queued_leaves_the_queue_and_spares_the_running_job(ui) -> None:
    from cosyvoice_ui.ui import strings

    handlers, manager, engine = ui
    engine.release.clear()
    first = ui_run(handlers, "alice")
    result: list = []
    holder = threading.Thread(target=lambda: result.append(list(first)), daemon=True)
    holder.start()
    assert engine.started.wait(WAIT_S)
    stopped: list[str] = []

    def queued() -> None:
        *_, last = list(ui_run(handlers, "bob"))
        stopped.append(last[2])  # the info line of the run's last update

    waiter = threading.Thread(target=queued, daemon=True)
    waiter.start()
    wait_until(lambda: manager.status().queued == 1, "bob's job queued")
    handlers.stop(Browser("bob"))  # bob's Stop must not touch alice's job
    waiter.join(WAIT_S)
    assert stopped == [strings.label("stopped", "en")] and manager.status().queued == 0
    engine.release.set()
    holder.join(WAIT_S)
    assert result and Path(result[0][-1][1]).is_file(), "the running job was disturbed by another session's Stop"


def test_gradio_cancelling_the_event_frees_the_slot(ui) -> None:
    """Stop's `cancels=` makes Gradio drop the running generator: that alone must end the job."""
    handlers, manager, engine = ui
    run = ui_run(handlers, "carol")
    next(run)
    run.close()  # what Gradio does with a cancelled event's iterator
    assert not manager.busy and not engine.finished.is_set()
    final = list(ui_run(handlers, "carol", seed=3))[-1]
    assert Path(final[1]).is_file()


# --- shutting down: running jobs finish, new and queued ones are refused -------------------------------------


def test_shutdown_finishes_the_running_job_and_refuses_the_queued_one() -> None:
    manager, made = fake_manager(chunks=3, chunk_samples=800)
    manager.engine()
    made[0].release.clear()
    running, queued = Job(manager, seed=1), Job(manager, seed=2)
    running.start()
    assert made[0].started.wait(WAIT_S)
    queued.start()
    wait_until(lambda: manager.status().queued == 1, "a job queued")
    stopper = threading.Thread(target=manager.shutdown, daemon=True)
    stopper.start()
    queued.join(WAIT_S)
    assert isinstance(queued.error, ShuttingDown), f"the queued job was not refused: {queued.error!r}"
    with pytest.raises(ShuttingDown):
        with manager.job():
            pass
    stopper.join(0.3)
    assert stopper.is_alive() and not made[0].closed, "shutdown released the model under a running job"
    made[0].release.set()
    running.join(WAIT_S)
    stopper.join(WAIT_S)
    assert running.error is None and not running.closed_under_it
    assert np.array_equal(np.concatenate(running.samples), reference(1, chunks=3, chunk_samples=800))
    assert made[0].closed and manager.state == "unloaded"


def test_rest_refuses_new_jobs_with_503_and_retry_after_while_shutting_down(tmp_path: Path) -> None:
    engine = FakeEngine(name="fake-model", speakers=("alice",), chunks=2, chunk_samples=800)
    manager = ModelManager("fake", loader=lambda mid, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda mid: engine.info)
    app = FastAPI()
    add_routes(app, manager, Settings(voices_dir=tmp_path / "voices", rate_limit_per_min=0))
    client = TestClient(app, base_url=LOOPBACK)
    body = {"input": "hello there", "voice": "alice"}
    assert client.post("/v1/audio/speech", json=body).status_code == 200
    manager.begin_shutdown()
    for payload in (body, {**body, "stream_format": "audio", "response_format": "pcm"}):
        response = client.post("/v1/audio/speech", json={**payload, "seed": 99})
        error = response.json()["error"]
        assert response.status_code == 503 and error["code"] == "shutting_down"
        assert "shutting down" in error["message"] and int(response.headers["Retry-After"]) > 0
    assert client.get("/health").status_code == 200, "/health stops answering while shutting down"


def test_cancelled_and_shutting_down_are_distinct_for_the_ui() -> None:
    """The UI tells the user "Stopped." for their own Stop, and the server's reason for a shutdown."""
    from cosyvoice_ui.ui.handlers import failure_text
    from cosyvoice_ui.ui import strings

    assert failure_text(Cancelled("stop"), "en") == strings.label("stopped", "en")
    assert "shutting down" in failure_text(ShuttingDown(), "en")
