"""Damaged model folders (issue 13, fault tests): a corrupt `.pt`, a truncated ONNX file, a missing file.

Each folder is a copy of the tiny random model with one file spoiled. Loading it must fail with a clear,
specific error (the bad file by its name in the folder, never a full path; how to fix it: re-download with
`python -m cosyvoice_ui download ...`), and the app must keep serving: /health answers, the UI builds and
answers, and the offline voice still speaks.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cosyvoice_ui.errors import CosyVoiceError
from cosyvoice_ui.serving.backends import OFFLINE_ID
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import LoadOptions, Settings
from tests.web_client import LOOPBACK

FIX_HINT = "python -m cosyvoice_ui download"
TOKENIZER = "speech_tokenizer_v1.onnx"  # the tiny base model's (v1) speech tokenizer


def corrupt(path: Path) -> None:
    """Same size, wrong bytes: what a bad disk or an interrupted copy leaves."""
    path.write_bytes(bytes(range(256)) * (path.stat().st_size // 256 + 1))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def remove(path: Path) -> None:
    path.unlink()


DAMAGES = [
    ("llm.pt", corrupt), ("flow.pt", truncate), ("hift.pt", remove),
    ("campplus.onnx", truncate), (TOKENIZER, corrupt), ("campplus.onnx", remove),
]
DAMAGE_IDS = [f"{name}-{damage.__name__}" for name, damage in DAMAGES]


def damaged_copy(source: Path, work: Path, file_name: str, damage) -> Path:
    folder = work / "CosyVoice-300M"  # a catalogue name: the hint can name the exact download
    shutil.copytree(source, folder)
    damage(folder / file_name)
    return folder


def assert_clear(message: str, file_name: str, work: Path) -> None:
    """Names the file, says how to fix it, and shows no path, traceback or object repr."""
    assert file_name in message, message
    assert FIX_HINT in message, f"no re-download hint: {message}"
    assert str(work) not in message and not re.search(r"(^|[\s(:'\"])/[\w.-]+/", message), f"a path: {message}"
    assert "Traceback" not in message and " object at 0x" not in message, message
    assert "weights_only" not in message, f"torch's unsafe advice reached the user: {message}"


@pytest.mark.parametrize(("file_name", "damage"), DAMAGES, ids=DAMAGE_IDS)
def test_loading_a_damaged_folder_names_the_file_and_the_fix(tiny_base: Path, tmp_path: Path, file_name: str,
                                                             damage) -> None:
    folder = damaged_copy(tiny_base, tmp_path, file_name, damage)
    manager = ModelManager(str(folder), load_options=LoadOptions(device="cpu"), idle_unload_s=0)
    with pytest.raises(CosyVoiceError) as info:
        manager.engine()
    assert_clear(str(info.value), file_name, tmp_path)
    status = manager.status()
    assert status.state == "error" and file_name in status.error
    with pytest.raises(CosyVoiceError):  # a second try fails the same way (nothing half-loaded is kept)
        manager.engine()
    assert manager.loaded is None


def offline_voice_available() -> bool:
    from cosyvoice_ui.offline import offline_available
    from cosyvoice_ui.offline.fallback import fallback_available

    return offline_available()[0] or fallback_available()[0]


@pytest.mark.slow
@pytest.mark.parametrize(("file_name", "damage"), [("campplus.onnx", truncate), ("hift.pt", remove)],
                         ids=["truncated-onnx", "missing-file"])
def test_the_app_keeps_serving_around_a_damaged_model(tiny_base: Path, tmp_path: Path, file_name: str,
                                                      damage) -> None:
    import gradio as gr

    from cosyvoice_ui.ui.handlers import Handlers, OutputOptions
    from cosyvoice_ui.ui.requests import request_from_meta, sft_meta
    from cosyvoice_ui.web.server import create_app

    folder = damaged_copy(tiny_base, tmp_path, file_name, damage)
    settings = Settings(model_dir=folder, models_dir=tmp_path / "models", voices_dir=tmp_path / "voices",
                        device="cpu", idle_unload_s=0, rate_limit_per_min=0,
                        extra={"output_dir": str(tmp_path / "outputs")})
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:  # the UI builds around the damaged model
        manager: ModelManager = client.app.state.manager
        assert client.get("/health").status_code == 200
        response = client.post("/v1/audio/speech", json={"input": "Hello there.", "response_format": "wav"})
        assert response.status_code in (422, 503), response.text
        assert_clear(response.json()["error"]["message"], file_name, tmp_path)
        health = client.get("/health")
        assert health.status_code == 200 and file_name in health.json()["model"]["error"]
        assert client.get("/").status_code == 200, "the UI page stopped answering"
        assert client.get("/config").status_code == 200, "the UI's config stopped answering"
        # The UI's own path to the same model: a stopping message, not a crash.
        handlers = Handlers(manager, settings, tmp_path / "ui-outputs")
        meta = sft_meta("", "Hello there.")
        with pytest.raises(gr.Error) as info:
            list(handlers.run(request_from_meta(meta, seed=1), OutputOptions(), [], None, None, meta))
        assert_clear(str(info.value.message), file_name, tmp_path)
        if not offline_voice_available():
            pytest.skip("no offline voice is installed (Kokoro-82M or espeak-ng): its part of the check is skipped")
        manager.select(OFFLINE_ID)  # what the model panel does when the user picks the offline voice
        spoken = client.post("/v1/audio/speech", json={"input": "Hello there.", "response_format": "wav"})
        assert spoken.status_code == 200 and spoken.content[:4] == b"RIFF" and len(spoken.content) > 10_000
        health = client.get("/health").json()
        assert health["status"] == "ok" and health["model"]["state"] == "loaded"
