"""The real CPU image (issue 16): built with Podman from the repository's Dockerfile on a base made from Debian's
packages alone, run, and probed with its own HEALTHCHECK (scripts/container_image.py does the steps; a developer runs
it by hand the same way).

Where this machine cannot run containers (not root; podman, runc or debootstrap missing; debootstrap, the import or
a trivial container failing) the test skips with the reason. Once that pre-flight has passed, the image must build
and become healthy, or the test fails. The base rootfs is cached in ~/.cache/cosyvoice_ui/container-base, so only
the first run spends the debootstrap (about a minute), and the built image is kept under a hash of its build
context: a later run with the same context checks that cached build instead of building again, and a changed one
rebuilds only the layers after the venv's (podman's layer cache). Run it alone with timings: pytest -s -m slow
tests/test_container_image.py
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("container_image", REPO / "scripts" / "container_image.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


ci = load_script()


def test_base_image_and_pip_forwarding_helpers(tmp_path: Path) -> None:
    """The pure parts: the FROM name and its Debian suite, the limits, and which host paths the pip settings name."""
    assert ci.base_images(REPO / "Dockerfile") == ["python:3.11-slim-bookworm"]
    assert ci.debian_suite("python:3.11-slim-bookworm") == ("bookworm", "3.11")
    with pytest.raises(ci.Unavailable):
        ci.debian_suite("nvidia/cuda:12.8.1-runtime-ubuntu24.04")
    flags = ci.ulimit_args()
    assert flags[0::2] == ["--ulimit", "--ulimit"] and flags[1].startswith("nofile=")

    (tmp_path / "index" / "simple").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "ca.pem").write_text("x")
    settings = {"extra-index-url": f"file://{tmp_path}/index/simple https://example.org/simple",
                "find-links": str(tmp_path / "wheels"), "cert": str(tmp_path / "ca.pem")}
    assert sorted(ci.pip_mounts(settings)) == sorted([tmp_path / "index", tmp_path / "wheels", tmp_path / "ca.pem"])
    assert ci.pip_mounts({"find-links": str(tmp_path), "cert": str(tmp_path / "ca.pem")}) == [tmp_path]
    assert ci.pip_conf({"cert": "/c.pem", "timeout": "9"}) == "[global]\ncert = /c.pem\ntimeout = 9\n"


def test_the_cache_key_follows_what_the_build_copies(tmp_path: Path) -> None:
    """The key changes with the Dockerfile, the .dockerignore or a file the build copies, and not with a file the
    .dockerignore leaves out (tests, docs, a venv, bytecode)."""
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / "scripts").mkdir()
    files = {"Dockerfile": "FROM x\n", ".dockerignore": "*\n!app.py\n!pkg/\n!scripts/install.sh\n**/__pycache__\n",
             "app.py": "print(1)\n", "pkg/mod.py": "A = 1\n", "pkg/__pycache__/mod.pyc": "bytes",
             "docs/readme.md": "text", ".venv/lib/site.py": "", "scripts/install.sh": "pip\n",
             "scripts/other.py": ""}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert ci.context_files(tmp_path) == ["app.py", "pkg/mod.py", "scripts/install.sh"]
    key = ci.context_key(tmp_path)
    for name in ("docs/readme.md", ".venv/lib/site.py", "pkg/__pycache__/mod.pyc", "scripts/other.py"):
        (tmp_path / name).write_text("changed")
    assert ci.context_key(tmp_path) == key
    for name in ("pkg/mod.py", "Dockerfile", ".dockerignore", "scripts/install.sh"):
        before = ci.context_key(tmp_path)
        (tmp_path / name).write_text((tmp_path / name).read_text() + "\n")
        assert ci.context_key(tmp_path) != before, name
    # The repository's own context: the app's code, the requirement files and the two scripts, nothing else.
    shipped = {name.split("/")[0] for name in ci.context_files(REPO)}
    assert shipped <= {"app.py", "cosyvoice_ui", "scripts", *(p.name for p in REPO.glob("requirements*.txt"))}
    assert "cosyvoice_ui/__init__.py" in ci.context_files(REPO)


@pytest.mark.slow
def test_image_builds_and_is_healthy(request) -> None:
    session = ci.Session()
    try:
        ci.preflight(session)
    except ci.Unavailable as exc:
        ci.cleanup(session)
        reason = f"cannot run containers here: {exc}"
        print(reason)
        pytest.skip(reason)
    try:
        image = ci.build(session)
        running = ci.start(session, image)
        ci.wait_healthy(session, running, seconds=120)
        facts = ci.check_app(session, running)
    except ci.ImageCheckFailed as exc:
        pytest.fail(str(exc))
    finally:
        problems = ci.cleanup(session)
        print("container image" + (" (cached build)" if session.cached else "") + ": "
              + ", ".join(f"{k} {v:.0f} s" for k, v in session.timings.items()))
    assert facts["uid"] == "10001"
    assert facts["healthcheck"] and "scripts/healthcheck.py" in " ".join(facts["healthcheck"]["Test"]), \
        "the HEALTHCHECK did not survive the build (--format docker)"
    assert facts["health"].get("status") == "ok"
    assert facts["ffmpeg"].startswith("/"), facts["ffmpeg"]
    assert facts["speech_status"] == 200 and facts["speech_magic"] == b"RIFF" and facts["speech_bytes"] > 1000
    assert not problems, problems
    left = session.podman("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert not [n for n in left if n.startswith(session.run_id)], left
    # The checked image stays as the one cached build, under its context's key.
    assert image == f"{ci.CACHE_REPO}:{ci.context_key(REPO)}"
    cached = session.podman("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    assert [t for t in cached if t.startswith(ci.CACHE_REPO + ":")] == [image], cached
    # tests/test_containers.py's host-venv stand-in for the image is then redundant in this run: it skips
    request.config.container_image_verified = True
