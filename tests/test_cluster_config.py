"""The cluster's configuration, serve.yaml and the ingress's model routing, without a cluster (the real-cluster
tests are tests/cluster, run by tests/test_cluster_netns.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from cosyvoice_ui.cluster.config import ClusterConfig
from cosyvoice_ui.errors import ConfigError
from cosyvoice_ui.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray Serve is not installed")


def config(**changes) -> ClusterConfig:
    settings = changes.pop("settings", Settings(models_dir=Path("/models"), voices_dir=Path("/shared/voices"),
                                                 idle_unload_s=120, concurrency=2, api_keys=("k",)))
    return ClusterConfig(settings=settings, **{"models": ("CosyVoice2-0.5B", "offline-default"), "replicas": 3,
                                               **changes})


def test_args_round_trip():
    original = config(replica_gpus=0.5, models_per_replica=1)
    args = original.to_args()
    json.dumps(args)  # plain values only: they travel to every replica and into serve.yaml
    again = ClusterConfig.from_args(args)
    assert again.models == original.models and again.replica_gpus == 0.5 and again.models_per_replica == 1
    for name in ("models_dir", "voices_dir", "idle_unload_s", "concurrency", "api_keys"):
        assert getattr(again.settings, name) == getattr(original.settings, name)


def test_idle_unload_is_scale_to_zero():
    scaling = config().autoscaling()
    assert scaling["min_replicas"] == 0 and scaling["downscale_to_zero_delay_s"] == 120
    assert scaling["max_replicas"] == 3 and scaling["initial_replicas"] == 3
    assert scaling["target_ongoing_requests"] == 2 == config().max_ongoing_requests  # the engine's concurrency
    assert scaling["look_back_period_s"] <= 120
    never = config(settings=Settings(idle_unload_s=0)).autoscaling()
    assert never["min_replicas"] == 1 and "downscale_to_zero_delay_s" not in never
    assert config().held_models() == 2 and config(models_per_replica=1).held_models() == 1


@pytest.mark.parametrize("changes, words", [
    ({"models": ()}, "at least one model"),
    ({"models": ("../etc",)}, "not a folder name"),
    ({"replicas": 0}, "--replicas"),
    ({"min_replicas": 4}, "--min-replicas"),
    ({"replica_cpus": 0, "replica_gpus": 0}, "share of a CPU or a GPU"),
    ({"models_per_replica": -1}, "--models-per-replica"),
    ({"cpu_models": ("Other",)}, "which --models does not serve"),
    ({"cpu_models": ("offline-default",), "cpu_replicas": 0}, "--cpu-replicas"),
])
def test_bad_configs_say_what_to_fix(changes, words):
    with pytest.raises(ConfigError, match=words.replace("-", r"\-")):
        config(**changes)


def test_the_offline_voice_gets_a_cpu_pool_of_its_own():
    split = config(replica_gpus=0.5, cpu_models=("offline-default",), cpu_replicas=2, cpu_replica_cpus=1.5)
    main, cpu = split.pools()
    assert (main.models, main.gpus, main.replicas) == (("CosyVoice2-0.5B",), 0.5, 3)
    assert (cpu.models, cpu.gpus, cpu.cpus, cpu.replicas) == (("offline-default",), 0.0, 1.5, 2)
    assert split.pool_of("offline-default") is not None and split.pool_of("offline-default").name == cpu.name
    assert split.autoscaling(cpu)["max_replicas"] == 2 and split.worker_actor_options(cpu)["num_gpus"] == 0.0
    assert split.ingress_capacity() == (3 + 2) * 2
    assert ClusterConfig.from_args(split.to_args()).pools() == split.pools()


def test_cli_puts_the_offline_voice_on_cpu_beside_gpu_replicas():
    from cosyvoice_ui.cluster.launch import add_cluster_flags, config_from_args
    from cosyvoice_ui.web.flags import build_parser, settings_from_args

    parser = build_parser()
    add_cluster_flags(parser)
    args = parser.parse_args(["--models", "CosyVoice2-0.5B,offline-default", "--replica-gpus", "1"])
    assert config_from_args(args, settings_from_args(args)).cpu_models == ("offline-default",)
    args = parser.parse_args(["--models", "CosyVoice2-0.5B,offline-default"])
    assert config_from_args(args, settings_from_args(args)).cpu_models == ()


def test_unknown_args_are_named():
    args = config().to_args()
    with pytest.raises(ConfigError, match="replica_gpu_count"):
        ClusterConfig.from_args({**args, "replica_gpu_count": 1})
    with pytest.raises(ConfigError, match="voice_dir"):
        ClusterConfig.from_args({**args, "settings": {"voice_dir": "/x"}})


@needs_ray
def test_serve_yaml_is_a_valid_deploy_config_that_builds():
    from ray.serve.schema import ServeDeploySchema

    from cosyvoice_ui.cluster.app import build

    document = yaml.safe_load((ROOT / "serve.yaml").read_text(encoding="utf-8"))
    schema = ServeDeploySchema.model_validate(document)
    (application,) = schema.applications
    assert application.import_path == "cosyvoice_ui.cluster.app:build"
    args = document["applications"][0]["args"]
    app = build(args)  # what `serve deploy` calls on the cluster
    ingress = app._bound_deployment
    workers = {name: bound._bound_deployment for name, bound in ingress.init_args[0].items()}
    assert ingress.name == "Ingress" and sorted(workers) == ["CpuEngineWorker", "EngineWorker"]
    main, cpu = workers["EngineWorker"], workers["CpuEngineWorker"]
    scaling = main._deployment_config.autoscaling_config
    assert scaling.min_replicas == 0 and scaling.max_replicas == args["replicas"]
    assert scaling.downscale_to_zero_delay_s == args["settings"]["idle_unload_s"]
    assert main.max_ongoing_requests == args["settings"]["concurrency"]
    assert main.ray_actor_options["num_gpus"] == args["replica_gpus"]
    assert cpu.ray_actor_options == {"num_cpus": args["cpu_replica_cpus"], "num_gpus": 0.0}
    assert cpu._deployment_config.autoscaling_config.max_replicas == args["cpu_replicas"]


def _routed(body: bytes, headers: dict[str, str], max_bytes: int = 1000, path: str = "/tts"):
    from cosyvoice_ui.cluster.ingress import ModelRouting

    seen = {}

    async def app(scope, receive, send):
        message = await receive()
        seen["model"] = scope.get("state", {}).get("model")
        seen["body"] = message.get("body", b"")

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    raw = [(k.lower().encode(), v.encode()) for k, v in {"content-length": str(len(body)), **headers}.items()]
    scope = {"type": "http", "method": "POST", "path": path, "headers": raw}
    asyncio.run(ModelRouting(app, max_bytes)(scope, receive, None))
    return seen


def test_routing_reads_the_model_and_leaves_the_body_whole():
    body = json.dumps({"text": "hi", "model": "tiny-b"}).encode()
    assert _routed(body, {"content-type": "application/json"}) == {"model": "tiny-b", "body": body}
    assert _routed(b"{}", {"content-type": "application/json", "x-model": "tiny-c"})["model"] == "tiny-c"
    assert _routed(body, {"content-type": "application/json"}, max_bytes=5) == {"model": None, "body": body}
    assert _routed(b"{not json", {"content-type": "application/json"})["model"] is None
    assert _routed(body, {"content-type": "application/json"}, path="/v1/voices")["model"] is None


@needs_ray
def test_cluster_command_refuses_an_open_public_bind(capsys):
    from cosyvoice_ui.cli.main import main

    assert main(["cluster", "--host", "0.0.0.0", "--models", "tiny"]) == 2
    err = capsys.readouterr().err
    assert "--api-key" in err and "Traceback" not in err
    assert main(["serve", "--ray", "--host", "0.0.0.0", "--models", "tiny"]) == 2  # `serve --ray` is `cluster`
    assert "without an API key" in capsys.readouterr().err


def test_single_process_tts_names_its_model(tmp_path):
    from tests.test_api import error_of, fake_client

    client, _, _ = fake_client(tmp_path)
    assert client.post("/tts", json={"text": "hi", "speaker": "alice", "model": "fake-model"}).status_code == 200
    response = client.post("/tts", json={"text": "hi", "speaker": "alice", "model": "other"})
    assert error_of(response) == (404, "model_not_found")


def test_domain_errors_cross_process_boundaries_as_themselves():
    """An engine replica's error reaches the ingress pickled; every one of ours must come back whole."""
    import pickle

    from cosyvoice_ui.errors import Cancelled, InvalidRequest
    from cosyvoice_ui.serving.manager import ShuttingDown

    for error in (InvalidRequest("voice_unknown", "there is no saved voice 'x'", voice="x"), Cancelled("stopped"),
                  ShuttingDown()):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error) and again.__dict__ == error.__dict__


def test_shared_voices_register_once_per_recording(tmp_path):
    """A replica registers a saved voice on first use, and again only when its recording changed (a voice
    deleted and saved again under the same id on another replica)."""
    from dataclasses import replace

    from cosyvoice_ui.cluster.worker import SharedVoices
    from cosyvoice_ui.serving.voices import VoiceLibrary
    from cosyvoice_ui.testing.fakes import FakeEngine
    from cosyvoice_ui.testing.signals import voice_clip

    class Registering(FakeEngine):
        def __init__(self) -> None:
            super().__init__()
            self.registered: list[str] = []

        def register_voice(self, voice_id, audio, transcript, cache_dir) -> None:
            self.registered.append(voice_id)
            self._info = replace(self._info, saved_voices=self._info.saved_voices + (voice_id,))

    library = VoiceLibrary(tmp_path / "voices")
    voice = library.add("Narrator", voice_clip(4.0, pitch=140.0), "a transcript")
    engine, shared = Registering(), SharedVoices(library)
    assert shared.ensure(engine, voice.id) is True
    assert shared.ensure(engine, voice.id) is False and engine.registered == [voice.id]
    assert shared.ensure(engine, "nobody") is False and shared.ensure(engine, None) is False
    library.remove(voice.id)
    again = library.add("Narrator", voice_clip(4.0, pitch=220.0), "a transcript")
    assert again.id == voice.id
    assert shared.ensure(engine, voice.id) is True and engine.registered == [voice.id, voice.id]


def test_an_evicted_model_never_drops_a_newer_load(tmp_path):
    from cosyvoice_ui.cluster.worker import HeldModel, WorkerBase

    class Manager:
        shutdowns = 0

        def shutdown(self, wait_s: float) -> None:
            Manager.shutdowns += 1

    worker = WorkerBase(config(settings=Settings(voices_dir=tmp_path / "voices")).to_args())
    old = HeldModel("CosyVoice2-0.5B", Manager(), worker._released)
    worker.held["CosyVoice2-0.5B"] = old
    old.__del__()  # Serve's eviction
    assert "CosyVoice2-0.5B" not in worker.held
    newer = HeldModel("CosyVoice2-0.5B", Manager(), worker._released)
    worker.held["CosyVoice2-0.5B"] = newer
    old.__del__()  # the garbage collector, later
    assert worker.held["CosyVoice2-0.5B"] is newer and Manager.shutdowns == 1


@needs_ray
@pytest.mark.parametrize("failure, retried", [("proxy died", True), ("port in use", False)])
def test_deploy_retries_the_http_proxy_once_only_when_it_did_not_start(monkeypatch, failure, retried):
    """Serve kills a proxy actor that took over 60 s to start (a loaded machine): deploy starts it once more. Any
    other start error (a port in use) is the user's to see at once, not retried."""
    from ray import serve
    from ray.exceptions import ActorDiedError

    from cosyvoice_ui.cluster import app, launch

    calls: list[str] = []

    def start(http_options):
        calls.append("start")
        if calls.count("start") == 1:
            raise ActorDiedError() if failure == "proxy died" else RuntimeError("address already in use")

    monkeypatch.setattr(serve, "start", start)
    monkeypatch.setattr(serve, "shutdown", lambda: calls.append("shutdown"))
    monkeypatch.setattr(serve, "run", lambda *a, **k: calls.append("run") or "handle")
    monkeypatch.setattr(app, "build_app", lambda cfg: "the app")
    if retried:
        assert launch.deploy(config()) == "handle"
        assert calls == ["start", "shutdown", "start", "run"]
    else:
        with pytest.raises(RuntimeError, match="already in use"):
            launch.deploy(config())
        assert calls == ["start"]
