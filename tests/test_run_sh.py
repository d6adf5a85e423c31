"""run.sh's first-run model check, with the install step and the app stubbed out (nothing is installed, started
or downloaded): a model given by flag or found in the models folder the app uses (`--models-dir`, default
pretrained_models) means no download; otherwise the recommended model is downloaded into that same folder when the
hub answers, and the offline voice starts when it does not."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The venv's python as run.sh calls it: `-c` snippets run for real, anything else (the download, app.py) is logged.
STUB_PYTHON = """#!/usr/bin/env bash
if [ "$1" = -c ]; then exec "{python}" "$@"; fi
echo "$*" >> "{log}"
"""


def run_sh(tmp_path: Path, *args: str, hub: str) -> tuple[str, list[str]]:
    """Run a copy of run.sh in `tmp_path` with `args`; (its output, the commands it gave the venv's python)."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "run.sh", root / "run.sh")
    (root / "scripts" / "install.sh").write_text("exit 0\n")
    venv_bin = root / ".venv" / "bin"
    venv_bin.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "python.log"
    (venv_bin / "python").write_text(STUB_PYTHON.format(python=sys.executable, log=log))
    (venv_bin / "python").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_ENDPOINT": hub, "COSYVOICE_AUTO_DOWNLOAD": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    done = subprocess.run(["bash", str(root / "run.sh"), *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr, log.read_text().splitlines() if log.exists() else []


@pytest.fixture()
def hub():
    """A reachable "hub" (a loopback port that accepts connections: run.sh only checks that it answers)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def dead_hub() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: nobody listens


def model_folder(models: Path) -> Path:
    folder = models / "CosyVoice-300M-SFT"
    folder.mkdir(parents=True)
    (folder / "cosyvoice.yaml").write_text("# the yaml tells the generation\n")
    return folder


@pytest.mark.parametrize("flags", [["--model-dir", "somewhere"], ["--model-dir=somewhere"],
                                   ["--engine-url", "http://127.0.0.1:9"], ["--help"]])
def test_a_given_model_or_help_downloads_nothing(tmp_path: Path, hub: str, flags: list[str]) -> None:
    output, commands = run_sh(tmp_path, *flags, hub=hub)
    assert "No model" not in output
    assert commands == [f"app.py {' '.join(flags)}"]


@pytest.mark.parametrize("form", ["separate", "joined"])
def test_a_model_in_the_apps_models_folder_is_found(tmp_path: Path, hub: str, form: str) -> None:
    models = tmp_path / "my-models"
    model_folder(models)
    flags = ["--models-dir", str(models)] if form == "separate" else [f"--models-dir={models}"]
    output, commands = run_sh(tmp_path, *flags, "--port", "7861", hub=hub)
    assert "No model" not in output
    assert commands == [f"app.py {' '.join(flags)} --port 7861"]


def test_without_a_model_the_download_goes_where_the_app_looks(tmp_path: Path, hub: str) -> None:
    from cosyvoice_ui.known_models import recommended_model

    models = tmp_path / "empty-models"
    models.mkdir()
    output, commands = run_sh(tmp_path, "--models-dir", str(models), hub=hub)
    name = recommended_model().name
    assert f"No model in {models} yet: downloading {name}" in output
    assert commands == [f"-m cosyvoice_ui download {name} --models-dir {models}", f"app.py --models-dir {models}"]
    # The default folder, with a model in it: nothing to do.
    model_folder(tmp_path / "checkout" / "pretrained_models")
    (tmp_path / "python.log").unlink()
    output, commands = run_sh(tmp_path, hub=hub)
    assert "No model" not in output and commands == ["app.py"]


def test_offline_without_a_model_starts_the_offline_voice(tmp_path: Path) -> None:
    output, commands = run_sh(tmp_path, hub=dead_hub())
    assert "No model in pretrained_models yet and the model hub is unreachable" in output
    assert commands == ["app.py"]
