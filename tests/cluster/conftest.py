"""Cluster tests: a real local Ray cluster with two CPU replicas of a tiny model, inside a network namespace
where only loopback exists. `tests/test_cluster_netns.py` runs this folder that way (`unshare -n`); a plain
pytest run does not collect it (Ray binds its services to the machine's external address otherwise).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

IN_NETNS = os.environ.get("COSYVOICE_NETNS") == "1"
if not IN_NETNS:
    collect_ignore_glob = ["test_*.py"]

API_KEY = "cluster-test-key"
PORT = 8765


def interfaces() -> list[str]:
    import socket

    return sorted(name for _, name in socket.if_nameindex())  # of this process's namespace (not sysfs's)


@pytest.fixture(scope="session")
def cluster_root(tmp_path_factory) -> Path:
    assert interfaces() == ["lo"], f"cluster tests run only where loopback is the one interface, not {interfaces()}"
    from cosyvoice_ui.testing.tiny_model import write_tiny_model

    root = tmp_path_factory.mktemp("cluster")
    write_tiny_model(root / "models" / "tiny-a", sft=True, seed=0)
    write_tiny_model(root / "models" / "tiny-b", sft=True, seed=1)
    return root


def cluster_config(root: Path, **changes):
    from cosyvoice_ui.cluster.config import ClusterConfig
    from cosyvoice_ui.settings import Settings

    settings = Settings(models_dir=root / "models", voices_dir=root / "voices", glossary_dir=root / "glossaries",
                        projects_dir=root / "projects", idle_unload_s=changes.pop("idle_unload_s", 0),
                        api_keys=(API_KEY,), take_retries=0, max_text_chars=2000)
    values = dict(models=("tiny-a", "tiny-b"), replicas=2, replica_cpus=0.25, ingress_cpus=0.1, port=PORT)
    values.update(changes)
    return ClusterConfig(settings=settings, **values)


@pytest.fixture(scope="session")
def cluster(cluster_root):
    """The running cluster's config; the app is deployed on it (tests may redeploy it, in file order)."""
    import time

    from cosyvoice_ui.cluster import launch

    config = cluster_config(cluster_root)
    started = time.perf_counter()
    launch.start_ray(None, config)
    launch.deploy(config)
    print(f"\ncluster up in {time.perf_counter() - started:.1f} s")
    yield config
    launch.stop()


@pytest.fixture()
def client(cluster):
    import httpx

    with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=120,
                      headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        yield c
