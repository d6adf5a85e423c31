"""The container files (issue 16): Dockerfile, Dockerfile.cuda, compose.yaml, .dockerignore, scripts/healthcheck.py
and the flags of scripts/install.sh.

The linters (hadolint, yamllint, check-jsonschema: requirements-dev.txt) run from this venv's bin dir; a missing
one skips its test with the reason, except under CI=true, where it fails. No container engine is needed. The
install-steps test (the Dockerfile's own `scripts/install.sh` line into a fresh venv here, the app started from it
as the image's CMD would) lives beside the real image's test in tests/test_container_image.py, which it stands in
for where no container can run; it uses this file's Dockerfile reader.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.web_client import free_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HEALTHCHECK = REPO / "scripts" / "healthcheck.py"
DOCKERFILES = ("Dockerfile", "Dockerfile.cuda")
VARIANT = {"Dockerfile": "cpu", "Dockerfile.cuda": "cuda"}


def linter(name: str) -> Path:
    """The linter `name` beside this interpreter; skipped with the reason if absent (failed under CI=true)."""
    path = BIN / name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    reason = (f"{name} not found in {BIN} (it comes with requirements-dev.txt: bash scripts/install.sh --dev)")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def run_linter(args: list[str | Path]) -> None:
    done = subprocess.run([str(a) for a in args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed:\n{done.stdout}{done.stderr}"


# --- reading a Dockerfile ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(path: Path) -> list[Stage]:
    """The stages of `path`: continuation lines joined, comment lines dropped (as Docker does, also inside a
    continued instruction)."""
    instructions, pending, start = [], "", 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = raw.strip()
        if text.startswith("#") or (not text and not pending):
            continue
        if not pending:
            start = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        pending += text
        keyword, _, args = pending.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        pending = ""
    stages: list[Stage] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            words = [w for w in ins.args.split() if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
            stages.append(Stage(words[0], name, [ins]))
        else:
            assert stages, f"{path.name}:{ins.line}: {ins.keyword} before the first FROM"
            stages[-1].instructions.append(ins)
    return stages


def variables(stage: Stage, until: Instruction | None = None) -> dict[str, str]:
    """ARG defaults and ENV values of `stage` up to (not including) `until`."""
    values: dict[str, str] = {}
    for ins in stage.instructions:
        if ins is until:
            break
        if ins.keyword not in ("ARG", "ENV"):
            continue
        words = shlex.split(ins.args)
        if ins.keyword == "ENV" and len(words) >= 2 and "=" not in words[0]:  # the legacy `ENV KEY value` form
            words = [f"{words[0]}={' '.join(words[1:])}"]
        for word in words:
            key, sep, value = word.partition("=")
            if sep or ins.keyword == "ENV":
                values[key] = re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), m.group(0)), value)
    return values


def run_command(ins: Instruction) -> str:
    """A RUN's shell command without its flags (--mount=..., --network=...)."""
    return re.sub(r"^(--\S+\s+)*", "", ins.args)


def json_args(ins: Instruction) -> list[str]:
    args = ins.args
    if ins.keyword == "HEALTHCHECK":
        args = args.split("CMD", 1)[1]
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"line {ins.line}: exec form"
    return value


def install_step(stages: list[Stage]) -> tuple[Stage, Instruction]:
    """The one RUN that calls scripts/install.sh, and its stage."""
    found = [(s, i) for s in stages for i in s.all("RUN") if "scripts/install.sh" in i.args]
    assert len(found) == 1, f"expected one RUN calling scripts/install.sh, found {len(found)}"
    return found[0]


def copies(stage: Stage, until: Instruction | None = None) -> list[tuple[list[str], str]]:
    """(context sources, destination) of each COPY from the build context in `stage` (up to `until`)."""
    out = []
    for ins in stage.instructions:
        if ins is until:
            break
        if ins.keyword in ("COPY", "ADD"):
            words = shlex.split(ins.args)
            if any(w.startswith("--from=") for w in words):
                continue
            words = [w for w in words if not w.startswith("--")]
            out.append((words[:-1], words[-1]))
    return out


def workdir(stage: Stage, until: Instruction | None = None) -> str:
    current = "/"
    for ins in stage.instructions:
        if ins is until:
            break
        if ins.keyword == "WORKDIR":
            current = ins.args if ins.args.startswith("/") else f"{current.rstrip('/')}/{ins.args}"
    return current


# --- .dockerignore ---------------------------------------------------------------------------------------------

def dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def _pattern_regex(pattern: str) -> re.Pattern:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignored(relpath: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parent folders decides."""
    parts = relpath.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _pattern_regex(pattern.lstrip("!").strip().strip("/"))
        if any(regex.fullmatch(c) for c in candidates):
            excluded = not negate
    return excluded


def context_files(source: str) -> list[Path]:
    """The files a COPY source names in the build context (a folder: everything under it), .dockerignore applied."""
    patterns = dockerignore_patterns()
    matched = sorted(REPO.glob(source)) if any(c in source for c in "*?[") else [REPO / source]
    files = []
    for path in matched:
        assert path.exists(), f"COPY source {source} does not exist"
        for file in ([path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())):
            if not ignored(file.relative_to(REPO).as_posix(), patterns):
                files.append(file)
    return files


def materialize(stage: Stage, root: Path, until: Instruction | None = None) -> None:
    """Copy what `stage`'s COPYs put into the image under `root` (an image path /x becomes root/x)."""
    for sources, dest in copies(stage, until):
        base = dest if dest.startswith("/") else f"{workdir(stage, until).rstrip('/')}/{dest}"
        target = root / base.lstrip("/")
        for source in sources:
            files = context_files(source)
            assert files, f"COPY {source}: nothing left after .dockerignore"
            src = REPO / source
            for file in files:
                if src.is_dir():
                    out = target / file.relative_to(src)
                elif dest.endswith("/") or len(sources) > 1:
                    out = target / file.name
                else:
                    out = target
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, out)


def test_a_missing_linter_skips_here_and_fails_under_ci(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys.modules[__name__], "BIN", tmp_path)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="hadolint not found"):
        linter("hadolint")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="hadolint not found"):
        linter("hadolint")


# --- linters -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint_passes(name: str) -> None:
    run_linter([linter("hadolint"), "--no-color", "--config", REPO / ".hadolint.yaml", REPO / name])


def test_yamllint_passes_on_every_top_level_yaml() -> None:
    files = sorted({*REPO.glob("*.yaml"), *REPO.glob("*.yml"), *REPO.glob(".*.yaml"), *REPO.glob(".*.yml")})
    assert REPO / "compose.yaml" in files
    run_linter([linter("yamllint"), "--strict", "-c", REPO / ".yamllint.yaml", *files])


def test_compose_file_matches_the_compose_spec() -> None:
    # The compose-spec schema is vendored in check-jsonschema: no network is used.
    run_linter([linter("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", REPO / "compose.yaml"])


# --- Dockerfile facts ----------------------------------------------------------------------------------------

def app_args(cmd: list[str]):
    """`python app.py FLAGS...` parsed by the app's own parser (so every flag exists and takes its value)."""
    from cosyvoice_ui.web.flags import build_parser

    assert cmd[:2] == ["python", "app.py"], cmd
    return build_parser().parse_args(cmd[2:])


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_layout(name: str) -> None:
    stages = parse_dockerfile(REPO / name)
    assert len(stages) >= 2, "multi-stage: a build stage and a runtime stage"
    names = {s.name for s in stages if s.name}
    for stage in stages:
        if stage.image in names:  # FROM an earlier stage
            continue
        repo, _, tag = stage.image.rpartition(":")
        assert repo and tag and tag != "latest" and "$" not in stage.image, f"base image not pinned: {stage.image}"
    if name == "Dockerfile":
        assert stages[0].image == "python:3.11-slim-bookworm"
    else:
        assert stages[0].image.startswith("nvidia/cuda:") and "-runtime-" in stages[0].image

    final = stages[-1]
    users = final.all("USER")
    assert users, "the final stage sets a USER"
    user = users[-1].args.split(":")[0]
    assert user not in ("root", "0") and (not user.isdigit() or int(user) >= 1000), f"USER {users[-1].args}"
    health = final.all("HEALTHCHECK")
    assert health and json_args(health[-1])[-1] == "scripts/healthcheck.py"
    assert re.search(r"--timeout=\d+s", health[-1].args), "a short probe timeout"
    volumes = [v for ins in final.all("VOLUME") for v in json.loads(ins.args)]
    assert "/models" in volumes and "/data" in volumes
    assert [ins.args for ins in final.all("EXPOSE")] == ["7860"]

    args = app_args(json_args(final.all("CMD")[-1]))
    assert args.host == "0.0.0.0" and args.port == 7860 and args.device == VARIANT[name]
    assert args.models_dir == Path("/models")
    for folder in (args.voices_dir, args.glossary_dir, args.projects_dir, args.output_dir):
        assert folder.parts[:2] == ("/", "data"), folder

    # The venv comes from install.sh in the build stage, with this image's torch build, and nothing else is copied
    # from that stage: the runtime stage holds the venv and the app's code only.
    stage, run = install_step(stages)
    assert stage is not final
    env = variables(stage, run)
    assert env.get("TORCH_VARIANT") == VARIANT[name] and env.get("VENV", "").startswith("/")
    from_build = [shlex.split(i.args) for i in final.all("COPY") if "--from=" in i.args]
    assert [w[-2:] for w in from_build] == [[env["VENV"], env["VENV"]]], from_build
    shipped = {src for sources, _ in copies(final) for src in sources}
    assert shipped == {"app.py", "cosyvoice_ui/", "scripts/healthcheck.py"}, shipped


@pytest.mark.parametrize("name", DOCKERFILES)
def test_build_stage_copies_what_install_sh_reads(name: str) -> None:
    stage, run = install_step(parse_dockerfile(REPO / name))
    copied = {Path(src).name for sources, _ in copies(stage, run) for src in sources}
    script = (REPO / "scripts" / "install.sh").read_text(encoding="utf-8")
    needed = set(re.findall(r"requirements[\w-]*\.txt", script)) - {"requirements-dev.txt"}
    assert needed <= copied, f"the build stage must COPY {sorted(needed - copied)}"
    assert "install.sh" in copied


def test_dockerignore_keeps_the_sources_and_drops_the_rest() -> None:
    patterns = dockerignore_patterns()
    for name in DOCKERFILES:
        for stage in parse_dockerfile(REPO / name):
            for sources, _ in copies(stage):
                for source in sources:
                    path = REPO / source
                    expected = [path] if path.is_file() else [
                        p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
                    assert sorted(context_files(source)) == sorted(expected), f"{name}: COPY {source}"
    for heavy in (".venv/bin/python", "pretrained_models/x/llm.pt", "outputs/a.wav", "voices/v/prompt.wav",
                  "tests/test_api.py", ".git/HEAD", "cosyvoice_ui/__pycache__/types.cpython-311.pyc"):
        assert ignored(heavy, patterns), f"{heavy} would be sent to the build"


# --- compose.yaml ---------------------------------------------------------------------------------------------

def interpolate(value):
    """Compose's ${VAR:-default} / ${VAR:?message} / ${VAR} with nothing set (a required one reads 'REQUIRED')."""
    if isinstance(value, str):
        value = re.sub(r"\$\{(\w+):?-([^}]*)\}", r"\2", value)
        value = re.sub(r"\$\{(\w+):?\?[^}]*\}", "REQUIRED", value)
        return re.sub(r"\$\{(\w+)\}", "", value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "compose.yaml").read_text(encoding="utf-8"))


def services_of(compose: dict, profile: str) -> dict[str, dict]:
    return {name: s for name, s in compose["services"].items() if profile in s.get("profiles", [])}


def test_compose_profiles(compose: dict) -> None:
    assert "version" not in compose, "the Compose spec has no version key"
    workstation, split = services_of(compose, "workstation"), services_of(compose, "split")
    assert len(workstation) == 1 and set(split) == {"engine", "ui"}
    (studio,) = workstation.values()
    assert any(str(p).endswith(":7860") for p in studio["ports"])
    assert {v.split(":")[1] for v in studio["volumes"]} == {"/models", "/data"}
    assert studio["build"]["dockerfile"] == "Dockerfile"


def split_command(service: dict) -> tuple[str, list[str]]:
    """(key-check script with Compose's $$ unescaped, the app command it execs) of a split-profile service."""
    command = service["command"]
    assert command[:2] == ["sh", "-c"] and command[3] == "sh", command[:4]
    return command[2].replace("$$", "$"), command[4:]


def test_compose_split_engine_and_thin_client(compose: dict) -> None:
    engine, ui = compose["services"]["engine"], compose["services"]["ui"]
    assert engine["build"]["dockerfile"] == "Dockerfile.cuda"
    devices = engine["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    for service in (engine, ui):  # the app's --api-key, through COSYVOICE_API_KEYS
        assert service["environment"]["COSYVOICE_API_KEYS"] == "${COSYVOICE_API_KEY:-}"
    # The engine runs the CUDA image's own command, unchanged.
    cuda_cmd = json_args(parse_dockerfile(REPO / "Dockerfile.cuda")[-1].all("CMD")[-1])
    assert split_command(engine)[1] == cuda_cmd

    _, command = split_command(ui)
    assert "${COSYVOICE_ENGINE_URL:-http://engine:7860}" in command
    args = app_args(interpolate(command))
    assert args.engine_url == "http://engine:7860" and args.host == "0.0.0.0"
    assert not any(v.endswith(":/models") for v in ui["volumes"]), "the thin client never loads a model"
    assert ui["depends_on"]["engine"]["condition"] == "service_healthy"
    assert ui["build"]["dockerfile"] == "Dockerfile"


@pytest.mark.parametrize("service", ["engine", "ui"])
def test_compose_split_services_refuse_to_start_without_the_key(compose: dict, service: str) -> None:
    script, _ = split_command(compose["services"][service])
    env = {k: v for k, v in os.environ.items() if k != "COSYVOICE_API_KEYS"}
    refused = subprocess.run(["sh", "-c", script, "sh", "echo", "started"], env=env, capture_output=True, text=True)
    assert refused.returncode == 64 and "set COSYVOICE_API_KEY" in refused.stderr and not refused.stdout
    env["COSYVOICE_API_KEYS"] = "secret"
    started = subprocess.run(["sh", "-c", script, "sh", "echo", "started"], env=env, capture_output=True, text=True)
    assert started.returncode == 0 and started.stdout == "started\n"


def test_compose_workstation_profile_needs_no_variables(compose: dict) -> None:
    """Compose interpolates every service, whatever the profile: no ${VAR:?...} may stop the workstation run."""
    assert not re.search(r"\$\{\w+:?\?", json.dumps(compose)), "a required ${VAR:?...} in compose.yaml"


def test_every_compose_service_has_the_healthcheck(compose: dict) -> None:
    for name, service in compose["services"].items():
        check = service.get("healthcheck")
        assert check and check["test"] == ["CMD", "python", "scripts/healthcheck.py"], name
        assert int(check["timeout"].rstrip("s")) <= 15, name


# --- scripts/healthcheck.py ------------------------------------------------------------------------------------

def healthcheck(port: int, cwd: Path = REPO, python: str = sys.executable, env: dict | None = None):
    env = {**(env or os.environ), "PORT": str(port), "HEALTHCHECK_TIMEOUT": "3"}
    env.pop("HEALTHCHECK_URL", None)
    return subprocess.run([python, "scripts/healthcheck.py"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=30)


@pytest.fixture
def fake_health():
    """A server on a free port whose /health answers what the test puts in `replies['now']`."""
    replies: dict = {"now": (200, b'{"status": "ok"}')}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            code, body = replies["now"] if self.path == "/health" else (404, b"{}")
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], replies
    server.shutdown()
    server.server_close()


def test_healthcheck_accepts_only_http_200_with_status_ok(fake_health) -> None:
    port, replies = fake_health
    assert healthcheck(port).returncode == 0
    for reply in ((200, b'{"status": "error"}'), (503, b'{"status": "ok"}'), (200, b"<html>"), (200, b"[]")):
        replies["now"] = reply
        done = healthcheck(port)
        assert done.returncode == 1, (reply, done.stdout, done.stderr)


def test_healthcheck_fails_fast_where_nothing_listens() -> None:
    started = time.monotonic()
    done = healthcheck(free_port())
    assert done.returncode == 1 and "/health" in done.stderr
    assert time.monotonic() - started < 10


# --- scripts/install.sh flags and stamp --------------------------------------------------------------------------

STUB_PYTHON = """#!/bin/sh
# A stand-in interpreter: logs every call; `-m venv DIR` makes DIR/bin/python (itself); everything else succeeds.
echo "$*" >> "$INSTALL_LOG"
if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
exit 0
"""


@pytest.fixture
def install_tree(tmp_path: Path):
    """A copy of install.sh and the requirement files, with a logging stub for Python: runs in milliseconds."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "install.sh", root / "scripts" / "install.sh")
    for name in ("requirements.txt", "requirements-offline.txt", "requirements-dev.txt", "requirements-serve.txt"):
        (root / name).write_text(f"# {name}\n", encoding="utf-8")
    stub = tmp_path / "python-stub"
    stub.write_text(STUB_PYTHON, encoding="utf-8")
    stub.chmod(0o755)
    log = tmp_path / "calls.log"

    def install(*flags: str, venv: str | None = None) -> tuple[int, list[str]]:
        before = log.read_text().splitlines() if log.exists() else []
        env = {**os.environ, "PYTHON": str(stub), "INSTALL_LOG": str(log), "TORCH_VARIANT": "cpu"}
        env.pop("VENV", None)
        if venv is not None:
            env["VENV"] = venv
        done = subprocess.run(["bash", str(root / "scripts" / "install.sh"), *flags], env=env, capture_output=True,
                              text=True, timeout=60)
        after = log.read_text().splitlines() if log.exists() else []
        installed = [line.split(" -r ")[-1] for line in after[len(before):] if " -r " in line]
        return done.returncode, installed

    return root, install


def test_install_sh_flags_and_stamp(install_tree) -> None:
    root, install = install_tree
    base = ["requirements.txt", "requirements-offline.txt"]
    assert install() == (0, base)
    assert (root / ".venv" / ".requirements.sha256").read_text().count("\n") == 2  # default venv: .venv
    assert install() == (0, [])                                                  # unchanged: nothing to do
    assert install("--dev") == (0, [*base, "requirements-dev.txt"])
    assert install() == (0, [])                      # a subset of what is installed
    assert install("--serve", "--dev") == (0, [*base, "requirements-dev.txt", "requirements-serve.txt"])
    assert install("--dev") == (0, []) and install("--serve") == (0, [])
    (root / "requirements.txt").write_text("# changed\n", encoding="utf-8")
    assert install("--dev") == (0, [*base, "requirements-dev.txt"])
    assert install("--serve") == (0, [*base, "requirements-serve.txt"])  # the serve install predates the change
    assert install("--bogus")[0] == 2


def test_install_sh_venv_override(install_tree, tmp_path: Path) -> None:
    root, install = install_tree
    assert install("--serve", venv=str(tmp_path / "elsewhere")) == (0, ["requirements.txt",
                                                                        "requirements-offline.txt",
                                                                        "requirements-serve.txt"])
    assert (tmp_path / "elsewhere" / "bin" / "python").is_file() and not (root / ".venv").exists()
    assert install(venv="rel-venv")[0] == 0 and (root / "rel-venv" / ".requirements.sha256").is_file()
