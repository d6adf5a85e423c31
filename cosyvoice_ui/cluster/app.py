"""The deployment graph: an ingress over the engine deployment. `build(args)` is serve.yaml's import_path
(`cosyvoice_ui.cluster.app:build`); `build_app(config)` is what `python -m cosyvoice_ui cluster` runs."""

from __future__ import annotations

from .config import INGRESS_NAME, ClusterConfig

INGRESS_HEADROOM = 8  # /health, voice listings and docs beside a full queue


def build_app(config: ClusterConfig):
    """The Serve application: `Ingress` (one replica, light) bound to one engine deployment per pool
    (`EngineWorker`, and `CpuEngineWorker` for the CPU-only models)."""
    from ray import serve

    from .ingress import ingress_class
    from .worker import worker_class

    args = config.to_args()
    workers = {}
    for pool in config.pools():
        worker = serve.deployment(
            worker_class(config.held_models(pool)), name=pool.name,
            max_ongoing_requests=config.max_ongoing_requests,
            autoscaling_config=config.autoscaling(pool),
            ray_actor_options=config.worker_actor_options(pool),
            graceful_shutdown_timeout_s=60)
        workers[pool.name] = worker.bind(args, pool.name)
    ingress = serve.deployment(
        ingress_class(), name=INGRESS_NAME, num_replicas=1,
        max_ongoing_requests=config.settings.queue_size + config.ingress_capacity() + INGRESS_HEADROOM,
        ray_actor_options={"num_cpus": config.ingress_cpus})
    return ingress.bind(workers, args)


def build(args: dict):
    """serve.yaml's application builder: `args` are `ClusterConfig.to_args()`'s keys."""
    return build_app(ClusterConfig.from_args(args))
