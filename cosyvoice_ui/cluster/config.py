"""What a cluster deployment is made of, as plain data: no Ray import, so flags and serve.yaml are checked
before any cluster starts.

One `ClusterConfig` travels to every replica (it pickles as a dict of plain values): the models to serve (ids
are folder names under `models_dir`, or the offline default voice's id), the replica sizing, the autoscaling
that makes idle unload work cluster-wide, and the app's own settings (keys, limits, shared voices folder).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..errors import ConfigError
from ..known_models import recommended_model
from ..settings import Settings

WORKER_NAME = "EngineWorker"
CPU_WORKER_NAME = "CpuEngineWorker"
INGRESS_NAME = "Ingress"
APP_NAME = "cosyvoice"
DEFAULT_SERVE_PORT = 8000
UPSCALE_DELAY_S = 2.0  # a burst gets its second replica in seconds, not after Serve's default 30 s
LOOK_BACK_S = 30.0  # Serve's default averaging window
METRICS_INTERVAL_S = 10.0  # ... and its default metrics period
DOWNSCALE_DELAY_S = 600.0  # Serve's default wait before it removes one of several replicas

# Settings fields that travel to the replicas (paths as strings); the rest keep their defaults there.
_SHARED_SETTINGS = ("models_dir", "voices_dir", "glossary_dir", "projects_dir", "device", "precision", "threads",
                    "api_keys", "no_auth", "rate_limit_per_min", "max_text_chars", "queue_size", "max_upload_mb",
                    "blocked_words_file", "default_voice", "voice_aliases_file", "cache_entries", "take_retries",
                    "check_takes", "idle_unload_s", "concurrency", "watermark")


@dataclass(frozen=True)
class Pool:
    """One engine deployment: the models it serves and how its replicas are sized."""

    name: str
    models: tuple[str, ...]
    replicas: int
    cpus: float
    gpus: float


@dataclass(frozen=True)
class ClusterConfig:
    """A deployment of the engine on Ray Serve.

    models: the model ids the cluster serves, the default one first (a folder name under `settings.models_dir`,
        or `offline-default`). Requests name one with `model`; without it, the first serves.
    replicas: engine replicas at most (and at start). min_replicas 0 lets an idle deployment scale to zero after
        `settings.idle_unload_s`, the same setting that unloads an idle model in one process.
    replica_cpus / replica_gpus: each replica's share (fractions allowed: 0.5 GPU packs two replicas on one GPU).
    models_per_replica: how many models one replica keeps loaded (LRU beyond that). 0 = all of its pool's
        models, so a burst of mixed ids reloads nothing once each replica has loaded them (size memory for it).
    cpu_models: models served by a pool of CPU-only replicas of their own (`cpu_replicas` of `cpu_replica_cpus`
        each), e.g. the offline voice beside GPU replicas of CosyVoice: it never takes a GPU replica's slot.
    """

    settings: Settings
    models: tuple[str, ...]
    replicas: int = 1
    min_replicas: int = 0
    replica_cpus: float = 1.0
    replica_gpus: float = 0.0
    models_per_replica: int = 0
    cpu_models: tuple[str, ...] = ()
    cpu_replicas: int = 1
    cpu_replica_cpus: float = 1.0
    ingress_cpus: float = 0.25
    host: str = "127.0.0.1"
    port: int = DEFAULT_SERVE_PORT
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.models:
            raise ConfigError("a cluster needs at least one model: pass --models NAME[,NAME...] (folder names "
                              "under --models-dir, or offline-default)")
        for model in self.models:
            if not model or Path(model).name != model or model in (".", ".."):
                example = recommended_model()
                raise ConfigError(f"model id {model!r} is not a folder name; name models by their folder under "
                                  f"--models-dir (e.g. {example.name if example else 'offline-default'})")
        if self.replicas < 1:
            raise ConfigError(f"--replicas must be at least 1 (got {self.replicas})")
        if not 0 <= self.min_replicas <= self.replicas:
            raise ConfigError(f"--min-replicas must be between 0 and --replicas ({self.replicas}); got "
                              f"{self.min_replicas}")
        if self.replica_cpus < 0 or self.replica_gpus < 0 or (self.replica_cpus == 0 and self.replica_gpus == 0):
            raise ConfigError("give each replica a share of a CPU or a GPU (--replica-cpus, --replica-gpus)")
        if self.models_per_replica < 0:
            raise ConfigError("--models-per-replica must be 0 (all models) or more")
        object.__setattr__(self, "models", tuple(self.models))
        object.__setattr__(self, "cpu_models", tuple(self.cpu_models))
        stray = [m for m in self.cpu_models if m not in self.models]
        if stray:
            raise ConfigError(f"--cpu-models names {', '.join(stray)}, which --models does not serve; list it in "
                              "--models too")
        if self.cpu_models and (self.cpu_replicas < 1 or self.cpu_replica_cpus <= 0):
            raise ConfigError("the CPU pool needs --cpu-replicas of at least 1 and --cpu-replica-cpus above 0")

    def pools(self) -> tuple[Pool, ...]:
        """The engine deployments: the main pool (GPU or CPU as sized), and the CPU pool if any."""
        main = tuple(m for m in self.models if m not in self.cpu_models)
        pools = [Pool(WORKER_NAME, main, self.replicas, self.replica_cpus, self.replica_gpus)] if main else []
        if self.cpu_models:
            pools.append(Pool(CPU_WORKER_NAME, self.cpu_models, self.cpu_replicas, self.cpu_replica_cpus, 0.0))
        return tuple(pools)

    def pool_of(self, model_id: str) -> Pool:
        """The pool that serves `model_id` (the first pool for an id no pool serves: it refuses it by name)."""
        pools = self.pools()
        return next((p for p in pools if model_id in p.models), pools[0])

    def pool(self, name: str) -> Pool:
        return next(p for p in self.pools() if p.name == name)

    # --- what Serve is given ------------------------------------------------------------------------------

    @property
    def max_ongoing_requests(self) -> int:
        """The engine's real concurrency: a replica runs `concurrency` jobs at once (its manager's slots)."""
        return max(1, self.settings.concurrency)

    def held_models(self, pool: Pool | None = None) -> int:
        pool = pool or self.pools()[0]
        return min(self.models_per_replica, len(pool.models)) if self.models_per_replica else len(pool.models)

    def autoscaling(self, pool: Pool | None = None) -> dict:
        """Serve's autoscaling_config of a pool (default: the first): up to its replicas, down to `min_replicas`,
        to zero after the idle delay. With idle unload off (idle_unload_s 0) a pool never scales to zero."""
        pool = pool or self.pools()[0]
        idle = self.settings.idle_unload_s
        window = min(LOOK_BACK_S, max(2.0, idle)) if idle > 0 else LOOK_BACK_S
        floor = min(self.min_replicas, pool.replicas) if idle > 0 else max(1, min(self.min_replicas, pool.replicas))
        config = {"min_replicas": floor, "max_replicas": pool.replicas, "initial_replicas": pool.replicas,
                  "target_ongoing_requests": self.max_ongoing_requests, "upscale_delay_s": UPSCALE_DELAY_S,
                  "downscale_delay_s": min(DOWNSCALE_DELAY_S, max(1.0, idle)) if idle > 0 else DOWNSCALE_DELAY_S,
                  # Serve averages load over this window before it decides: its default (30 s) would hold an
                  # idle replica 30 s past a shorter idle-unload setting (the window must exceed the metrics period)
                  "look_back_period_s": window, "metrics_interval_s": min(METRICS_INTERVAL_S, window / 2)}
        if floor == 0:
            config["downscale_to_zero_delay_s"] = max(1.0, idle)
        return config

    def worker_actor_options(self, pool: Pool | None = None) -> dict:
        pool = pool or self.pools()[0]
        return {"num_cpus": pool.cpus, "num_gpus": pool.gpus}

    def ingress_capacity(self) -> int:
        """Jobs the ingress lets run at once: every replica's slots (more wait in its FIFO queue)."""
        return sum(p.replicas for p in self.pools()) * self.max_ongoing_requests

    # --- travelling -------------------------------------------------------------------------------------------

    def to_args(self) -> dict:
        """Plain values (serve.yaml `args`, and what a replica is constructed with)."""
        shared = {}
        for name in _SHARED_SETTINGS:
            value = getattr(self.settings, name)
            shared[name] = str(value) if isinstance(value, Path) else (list(value) if isinstance(value, tuple)
                                                                       else value)
        args = {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("settings", "models", "cpu_models")}
        return {**asdict_plain(args), "models": list(self.models), "cpu_models": list(self.cpu_models),
                "settings": shared}

    @classmethod
    def from_args(cls, args: dict) -> ClusterConfig:
        """The inverse of `to_args`; also what serve.yaml's `args` hold (unknown keys are refused by name)."""
        args = dict(args)
        raw = dict(args.pop("settings", {}) or {})
        known = {f.name for f in fields(cls)} - {"settings"}
        unknown = sorted(set(args) - known)
        if unknown:
            raise ConfigError(f"unknown cluster option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        bad = sorted(set(raw) - set(_SHARED_SETTINGS))
        if bad:
            raise ConfigError(f"unknown setting(s) {', '.join(bad)} in the cluster's settings; known: "
                              f"{', '.join(_SHARED_SETTINGS)}")
        settings = settings_from_plain(raw)
        for name in ("models", "cpu_models"):
            if isinstance(args.get(name), str):
                args[name] = [m.strip() for m in args[name].split(",") if m.strip()]
        return cls(settings=settings, **{**args, "models": tuple(args.get("models", ())),
                                         "cpu_models": tuple(args.get("cpu_models", ()))})


def asdict_plain(values: dict) -> dict:
    return {k: (asdict(v) if hasattr(v, "__dataclass_fields__") else v) for k, v in values.items()}


def settings_from_plain(raw: dict) -> Settings:
    """Settings from plain values: paths back to Path, lists back to tuples, keys also from the environment."""
    from ..settings import env_api_keys

    values = dict(raw)
    for name in ("models_dir", "voices_dir", "glossary_dir", "projects_dir", "blocked_words_file",
                 "voice_aliases_file"):
        if values.get(name) not in (None, ""):
            values[name] = Path(values[name])
        elif name in values:
            values[name] = None
    keys = tuple(values.pop("api_keys", ()) or ())
    return Settings(**values, api_keys=tuple(dict.fromkeys(keys + env_api_keys())))
