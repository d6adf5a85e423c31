"""`python -m cosyvoice_ui cluster ...` (also `serve --ray ...`): start a local Ray head or join a cluster,
deploy the app on Serve, and serve until Ctrl-C. The app's own flags apply (keys, limits, voices folder, idle
unload); the cluster flags size the replicas. `--ui-port` also serves the Gradio UI from this process as a thin
client of the cluster (it never loads a model).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from pathlib import Path

from ..errors import ConfigError
from .config import APP_NAME, ClusterConfig

log = logging.getLogger(__name__)

LOCAL_OBJECT_STORE_MB = 512  # chunks of audio, not tensors: Ray's default (30 % of RAM in /dev/shm) is far more


def add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster (Ray Serve)")
    group.add_argument("--models", default="", metavar="NAME[,NAME...]",
                       help="model folders under --models-dir to serve, the default first (offline-default: the "
                            "built-in voice); default: --model-dir's folder, else the first folder found")
    group.add_argument("--replicas", type=int, default=1, help="engine replicas at most (and at start)")
    group.add_argument("--min-replicas", type=int, default=0,
                       help="replicas kept when idle; 0 scales to zero after --idle-unload seconds")
    group.add_argument("--replica-cpus", type=float, default=1.0, help="CPUs per replica (fractions allowed)")
    group.add_argument("--replica-gpus", type=float, default=0.0,
                       help="GPUs per replica: 1 = one each, 0.5 = two replicas share a GPU")
    group.add_argument("--models-per-replica", type=int, default=0,
                       help="models one replica keeps loaded (LRU beyond); 0 = all of its pool's models")
    group.add_argument("--cpu-models", default=None, metavar="NAME[,NAME...]",
                       help="models served by CPU-only replicas of their own; default: offline-default when "
                            "--replica-gpus is set (the offline voice never takes a GPU replica's slot)")
    group.add_argument("--cpu-replicas", type=int, default=1, help="CPU-only replicas at most")
    group.add_argument("--cpu-replica-cpus", type=float, default=1.0, help="CPUs per CPU-only replica")
    group.add_argument("--address", default=None,
                       help="join this Ray cluster (e.g. auto, or HEAD:6379) instead of starting a local one")
    group.add_argument("--ui-port", type=int, default=None,
                       help="also serve the web UI on this port, as a thin client of the cluster")


def config_from_args(args: argparse.Namespace, settings) -> ClusterConfig:
    from ..serving.backends import OFFLINE_ID, default_model_id

    models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    if not models:
        models = (Path(default_model_id(settings.model_dir, settings.models_dir)).name,)
        if settings.model_dir is not None:
            settings = settings.with_(models_dir=Path(settings.model_dir).parent)
    if args.cpu_models is None:
        cpu_models = (OFFLINE_ID,) if args.replica_gpus > 0 and OFFLINE_ID in models and len(models) > 1 else ()
    else:
        cpu_models = tuple(m.strip() for m in args.cpu_models.split(",") if m.strip())
    return ClusterConfig(settings=settings, models=models, replicas=args.replicas, min_replicas=args.min_replicas,
                         replica_cpus=args.replica_cpus, replica_gpus=args.replica_gpus,
                         models_per_replica=args.models_per_replica, cpu_models=cpu_models,
                         cpu_replicas=args.cpu_replicas, cpu_replica_cpus=args.cpu_replica_cpus,
                         host=settings.host, port=settings.port)


def check_access(config: ClusterConfig) -> None:
    """A cluster reachable from the network needs a key: every ingress replica must hold the same one, so none
    is generated (as the single-process app does) - it is refused instead."""
    settings = config.settings
    if settings.host not in ("127.0.0.1", "localhost", "::1") and not settings.api_keys and not settings.no_auth:
        raise ConfigError(f"the cluster would listen on {settings.host} without an API key: pass --api-key KEY "
                          "(or set COSYVOICE_API_KEYS); --no-auth serves it open on purpose")


def start_ray(address: str | None, config: ClusterConfig) -> None:
    """Join `address`, or start a local head on this machine (loopback when the app binds loopback)."""
    import ray

    package_root = str(Path(__file__).resolve().parents[2])
    env = {"PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)}
    if address:
        ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=False)
        return
    needed = sum(p.replicas * p.cpus for p in config.pools()) + config.ingress_cpus + 0.5
    gpus = sum(p.gpus for p in config.pools())
    loopback = config.host in ("127.0.0.1", "localhost")
    if loopback:  # without it Ray swaps 127.0.0.1 for the machine's external address
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray.init(address="local", include_dashboard=False, num_cpus=max(os.cpu_count() or 1, math.ceil(needed)),
             num_gpus=None if gpus else 0, object_store_memory=LOCAL_OBJECT_STORE_MB * 2**20,
             runtime_env={"env_vars": env}, log_to_driver=False,
             **({"_node_ip_address": "127.0.0.1"} if loopback else {}))


def deploy(config: ClusterConfig):
    """Start Serve's HTTP proxy on the configured host/port and deploy the app (returns when it is running)."""
    from ray import serve

    from .app import build_app

    from ray.exceptions import GetTimeoutError, RayActorError

    http = {"host": config.host, "port": config.port}
    try:
        serve.start(http_options=http)
    except (RayActorError, GetTimeoutError) as exc:
        # Serve gives its proxy actor 60 s to start and then kills it; on a loaded machine its start can take longer
        # (seen in CI while the other test worker was busy). One more try on the now warm node; any other error
        # (a port in use, a bad option) is not retried.
        log.warning("Serve's HTTP proxy did not start (%s); trying once more", type(exc).__name__)
        serve.shutdown()
        serve.start(http_options=http)
    return serve.run(build_app(config), name=APP_NAME, route_prefix="/", blocking=False)


def stop() -> None:
    import ray
    from ray import serve

    try:
        serve.shutdown()
    finally:
        ray.shutdown()


def main(argv: list[str]) -> int:
    from ..web.flags import build_parser, settings_from_args

    parser = build_parser()
    parser.prog = "python -m cosyvoice_ui cluster"
    parser.description = "Serve the REST API from engine replicas on Ray Serve (pip install -r requirements-serve.txt)"
    add_cluster_flags(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import ray  # noqa: F401
    except ImportError:
        print("error: the cluster needs Ray Serve, which is not installed: pip install -r requirements-serve.txt",
              file=sys.stderr)
        return 2
    settings = settings_from_args(args)
    try:
        config = config_from_args(args, settings)
        check_access(config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    start_ray(args.address, config)
    try:
        deploy(config)
        url = f"http://{config.host}:{config.port}"
        pools = "; ".join(f"{p.name}: {', '.join(p.models)} on up to {p.replicas} replica(s)" for p in config.pools())
        print(f"CosyVoice Studio cluster on {url} ({pools}; ready in {time.perf_counter() - started:.1f} s). "
              "Ctrl-C stops it.", file=sys.stderr)
        if args.ui_port:
            from ..web.server import serve as serve_ui

            key = settings.api_keys[0] if settings.api_keys else None
            ui = settings.with_(engine_url=url, port=args.ui_port, api_keys=(key,) if key else ())
            return serve_ui(ui)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        stop()
